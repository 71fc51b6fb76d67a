/**
 * A destination's message as its service would show it, drawn from the preview answer
 * (`POST /forms/:id/destinations/preview`): Slack's blocks, Discord's embed, the Teams
 * card, Telegram's text, an email's subject, or a webhook's JSON. An approximation of
 * each service's look, built as text nodes only (the message's escapes are undone for
 * display, never parsed as HTML).
 */
import { h } from "./dom.js";

const unescapeEntities = (text) =>
  text.replaceAll("&lt;", "<").replaceAll("&gt;", ">").replaceAll("&amp;", "&");
const unescapeBackslashes = (text) => text.replace(/\\(.)/g, "$1");

/** `*bold*` (Slack) or `**bold**` (Discord, Teams) spans as <strong>, the rest as text. */
function emphasis(text, marker, unescape) {
  const pattern = marker === "*" ? /\*([^*\n]+)\*/g : /\*\*([^\n]+?)\*\*/g;
  const parts = [];
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    parts.push(unescape(text.slice(last, match.index)), h("strong", {}, unescape(match[1])));
    last = match.index + match[0].length;
  }
  parts.push(unescape(text.slice(last)));
  return parts;
}

/** Lines as paragraphs, each with its emphasis. */
const lines = (text, marker, unescape) =>
  text.split("\n").map((line) => h("div", {}, emphasis(line, marker, unescape)));

function slack(message) {
  return message.blocks.map((block) =>
    block.type === "context"
      ? h("div", { class: "small" }, lines(block.elements[0].text, "*", unescapeEntities))
      : h("div", { class: "block" }, lines(block.text.text, "*", unescapeEntities))
  );
}

function discord(message) {
  const embed = message.embeds[0];
  return h(
    "div",
    { class: "embed" },
    message.username ? h("div", { class: "sender" }, message.username) : null,
    h("div", { class: "title" }, embed.title),
    embed.description ? lines(embed.description, "**", unescapeBackslashes) : null,
    (embed.fields ?? []).map((field) =>
      h(
        "div",
        { class: "field" },
        h("strong", {}, unescapeBackslashes(field.name)),
        h("div", {}, unescapeBackslashes(field.value)),
      )
    ),
    h("div", { class: "small" }, embed.footer.text),
  );
}

function teams(message) {
  const card = message.attachments[0].content;
  return h(
    "div",
    { class: "adaptive" },
    card.body.map((item) => {
      if (item.type === "FactSet") {
        return h(
          "table",
          {},
          item.facts.map((fact) =>
            h(
              "tr",
              {},
              h("th", {}, unescapeBackslashes(fact.title)),
              h("td", {}, unescapeBackslashes(fact.value)),
            )
          ),
        );
      }
      const style = item.weight === "Bolder" ? "title" : item.isSubtle ? "small" : "block";
      return h("div", { class: style }, lines(item.text, "**", unescapeBackslashes));
    }),
  );
}

/** Telegram's HTML: <b> and <i> become elements, everything else text. */
function telegram(message) {
  const root = h("div", { class: "bubble" });
  let current = root;
  for (const piece of message.text.split(/(<\/?[bi]>)/)) {
    if (piece === "<b>" || piece === "<i>") {
      const element = h(piece === "<b>" ? "strong" : "em", {});
      current.append(element);
      current = element;
    } else if (piece === "</b>" || piece === "</i>") current = current.parentElement ?? root;
    else current.append(unescapeEntities(piece));
  }
  return root;
}

const RENDERERS = { slack, discord, teams, telegram };

/** The preview of a message of `type`. */
export function messagePreview(type, message) {
  const render = RENDERERS[type];
  const body = render
    ? render(message)
    : type === "smtp"
    ? h("div", { class: "block" }, h("strong", {}, "Subject: "), message.subject)
    : h("pre", {}, JSON.stringify(message, null, 2));
  return h("figure", { class: `preview ${type}`, "aria-label": "Message preview" }, body);
}
