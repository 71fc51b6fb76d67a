/** A form's ready-to-paste snippets: a plain HTML form and a fetch version. */
import { apiOk } from "./api.js";
import { copyButton, h } from "./dom.js";
import { formHeader, loadForm } from "./forms.js";

/** A value as an HTML attribute's text. */
function attr(value) {
  return value.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;");
}

/** The honeypot input: off screen for people, left to bots. */
function honeypotInput(field) {
  return field
    ? `\n  <!-- Leave empty: a spam trap (honeypot) people never see -->\n  <input type="text" name="${
      attr(field)
    }" tabindex="-1" autocomplete="off" aria-hidden="true"\n    style="position:absolute;left:-10000px">`
    : "";
}

const FIELDS = `  <label>Email <input type="email" name="email" required></label>
  <label>Message <textarea name="message" required></textarea></label>`;

/** The plain HTML version: the browser posts and lands on the redirect or thank-you page. */
export function plainSnippet(endpoint, form) {
  return `<form action="${endpoint}" method="POST">
${FIELDS}${honeypotInput(form.honeypotField)}
  <button type="submit">Send</button>
</form>`;
}

/** The fetch version: stays on the page and shows the answer. */
export function fetchSnippet(endpoint, form) {
  const captcha = form.verifyCaptcha
    ? `\n      // This form requires a captcha: pass your widget's token.\n      "x-captcha-token": captchaToken(),`
    : "";
  return `<form id="contact-form">
${FIELDS}${honeypotInput(form.honeypotField)}
  <button type="submit">Send</button>
  <p id="contact-status" role="status"></p>
</form>
<script>
  document.getElementById("contact-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const status = document.getElementById("contact-status");
    const response = await fetch("${endpoint}", {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        "Accept": "application/json",${captcha}
      },
      body: JSON.stringify(Object.fromEntries(new FormData(event.target))),
    }).catch(() => null);
    const answer = response ? await response.json().catch(() => ({})) : {};
    status.textContent = answer.ok ? "Thank you! Your message was sent." : "Sorry, it was not sent: " + (answer.error ?? "network error");
    if (answer.ok) event.target.reset();
  });
</script>`;
}

function snippetBlock({ title, id, text, note, copy }) {
  return h(
    "div",
    { class: "card" },
    h(
      "div",
      { class: "title-row" },
      h("h2", { id: `${id}-title` }, title),
      copyButton(copy, () => text),
    ),
    h("p", { class: "hint" }, note),
    h(
      "pre",
      { class: "snippet", id, tabindex: 0, "aria-labelledby": `${id}-title` },
      h("code", {}, text),
    ),
  );
}

/** The snippet page of a form. */
export async function snippetView(id) {
  const [form, { destinations }] = await Promise.all([
    loadForm(id),
    apiOk("GET", `/forms/${encodeURIComponent(id)}/destinations`),
  ]);
  const endpoint = `${location.origin}/v1/f/${form.publicKey}`;
  return h(
    "section",
    {},
    formHeader(form, "snippet"),
    destinations.length === 0
      ? h(
        "p",
        { class: "card notice-next" },
        "Submissions to this form go nowhere yet: ",
        h("a", { href: `#/forms/${form.id}/destinations` }, "add a destination"),
        ".",
      )
      : null,
    h(
      "div",
      { class: "card" },
      h("h2", {}, "Endpoint"),
      h(
        "p",
        {},
        h("code", { class: "endpoint" }, endpoint),
        " ",
        copyButton("Copy endpoint", () => endpoint),
      ),
      h(
        "p",
        { class: "hint" },
        "The public key in this address is safe to publish; it only lets people submit to this form.",
      ),
      form.allowedOrigins.length > 0
        ? h(
          "p",
          { class: "hint" },
          `Only pages on ${form.allowedOrigins.join(", ")} may post here.`,
        )
        : null,
    ),
    snippetBlock({
      title: "HTML form",
      id: "snippet-html",
      text: plainSnippet(endpoint, form),
      note:
        "Works without JavaScript: the browser posts and shows the thank-you page or your redirect URL.",
      copy: "Copy HTML form",
    }),
    snippetBlock({
      title: "Fetch version",
      id: "snippet-fetch",
      text: fetchSnippet(endpoint, form),
      note: "Stays on your page and shows the answer.",
      copy: "Copy fetch version",
    }),
  );
}
