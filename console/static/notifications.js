/**
 * Notifications: where the organization is told when delivery goes wrong (email, its
 * chat destinations, an operational webhook), of what, and the summary; and what was
 * sent lately. The webhook's secret is never shown: left as it is, it is kept. Each email
 * address shows whether its owner confirmed it (only confirmed ones are sent anything).
 */
import { api, apiOk, deployment } from "./api.js";
import { clearErrors, field, formError, h, showErrors, when } from "./dom.js";
import { overlapNote, rotateSecretControl } from "./rotation.js";

/** Each event, as the owner reads it. */
const EVENTS = [
  ["message.attempt.failing", "A destination starts failing (before anything is lost)"],
  ["endpoint.disabled", "A destination is paused (why, how many held)"],
  ["message.attempt.recovered", "A destination delivers again"],
  ["message.attempt.exhausted", "Submissions failed for good (ids and counts)"],
  ["tenant_key.rotated", "A tenant key is rotated"],
];
const EVENT_NAMES = Object.fromEntries([...EVENTS, ["summary", "Summary"], ["test", "Test"]]);
const CHAT_LABELS = { slack: "Slack", discord: "Discord", teams: "Teams", telegram: "Telegram" };
const CHAT_TYPES = Object.keys(CHAT_LABELS);
const REDACTED = "********";

/** Every destination of the organization, with its form's name. */
async function orgDestinations() {
  const { forms } = await apiOk("GET", "/forms");
  const lists = await Promise.all(forms.map(async (form) => {
    const { destinations } = await apiOk("GET", `/forms/${form.id}/destinations`);
    return destinations.map((d) => ({ ...d, formName: form.name }));
  }));
  return lists.flat();
}

function describe(destination) {
  const name = destination.name ? `${destination.name} · ` : "";
  const type = CHAT_LABELS[destination.type] ?? destination.type.toUpperCase();
  return `${name}${type} of “${destination.formName}” (${destination.id.slice(0, 8)})`;
}

/** The notifications page. */
export async function notificationsView() {
  const [{ notifications: settings }, destinations, { sent }, { platformRelay }] = await Promise
    .all([
      apiOk("GET", "/notifications"),
      orgDestinations(),
      apiOk("GET", "/notifications/sent"),
      deployment(),
    ]);
  // Only relays that exist: the platform's where the deployment has one, and the SMTP
  // destinations with a server of their own (one through the platform relay has none).
  const smtp = destinations.filter((d) => d.type === "smtp" && d.config.host);
  const chats = destinations.filter((d) => CHAT_TYPES.includes(d.type));

  const emailTo = h("textarea", { rows: 2, spellcheck: "false" });
  emailTo.value = (settings.email?.to ?? []).join("\n");
  const via = h(
    "select",
    {},
    platformRelay ? h("option", { value: "platform" }, "The platform's mail relay") : null,
    smtp.map((d) => h("option", { value: d.id }, `The relay of ${describe(d)}`)),
  );
  // The saved choice while it is still offered, else one that works.
  const offered = [...via.options].map((option) => option.value);
  const savedVia = settings.email?.via;
  via.value = offered.includes(savedVia) ? savedVia : offered[0] ?? "";
  const addressList = h("ul", { class: "addresses", "aria-label": "Confirmation of each address" });
  showAddresses(addressList, settings.email?.addresses ?? []);

  const chatBoxes = chats.map((d) => {
    const input = h("input", {
      type: "checkbox",
      value: d.id,
      checked: settings.chat.includes(d.id),
    });
    return field({ label: describe(d), path: `chat.${d.id}`, input });
  });

  const webhookUrl = h("input", { type: "url", spellcheck: "false", placeholder: "https://" });
  webhookUrl.value = settings.webhook?.url ?? "";
  const webhookSecret = h("input", {
    type: "text",
    spellcheck: "false",
    autocomplete: "off",
    placeholder: "whsec_…",
  });
  webhookSecret.value = settings.webhook?.signed ? REDACTED : "";

  const eventBoxes = EVENTS.map(([type, label]) =>
    field({
      label,
      path: `events.${type}`,
      input: h("input", { type: "checkbox", value: type, checked: settings.events.includes(type) }),
    })
  );
  const summary = h(
    "select",
    {},
    h("option", { value: "off" }, "No summary"),
    h("option", { value: "daily" }, "Daily (the last UTC day)"),
    h("option", { value: "weekly" }, "Weekly (Monday to Sunday)"),
  );
  summary.value = settings.summary;
  const saved = h("p", { class: "hint", role: "status" });
  // The operational webhook's new signing secret, shown once after a rotation.
  const rotated = h("div", { class: "rotated" });

  const form = h(
    "form",
    {
      class: "card",
      "aria-label": "Notification settings",
      onsubmit: async (event) => {
        event.preventDefault();
        clearErrors(form);
        saved.textContent = "";
        const to = emailTo.value.split(/\s+/).filter(Boolean);
        const url = webhookUrl.value.trim();
        const secret = webhookSecret.value.trim();
        const body = {
          email: to.length === 0 ? null : { to, via: via.value },
          chat: chatBoxes.map((f) => f.querySelector("input")).filter((i) => i.checked)
            .map((i) => i.value),
          // A secret left as shown is kept; emptied, it is removed.
          webhook: url === "" ? null : { url, secret: secret === "" ? null : secret },
          events: eventBoxes.map((f) => f.querySelector("input")).filter((i) => i.checked)
            .map((i) => i.value),
          summary: summary.value,
        };
        const { status, body: answer } = await api("PUT", "/notifications", body);
        if (status !== 200) return showErrors(form, answer);
        showAddresses(addressList, answer.notifications.email?.addresses ?? []);
        webhookUrl.value = answer.notifications.webhook?.url ?? "";
        webhookSecret.value = answer.notifications.webhook?.signed ? REDACTED : "";
        saved.textContent = "Saved.";
      },
    },
    h("fieldset", {}, h("legend", {}, "Email"), [
      field({
        label: "Addresses",
        path: "email.to",
        hint:
          "One per line. Empty: no email. Each new address is sent a link to confirm it: it gets nothing else until it is followed.",
        input: emailTo,
      }),
      addressList,
      field({
        label: "Send through",
        path: "email.via",
        hint: offered.length === 0
          ? "This deployment has no mail relay of its own: add an SMTP destination with your " +
            "mail server to a form to send email through it."
          : undefined,
        input: via,
      }),
    ]),
    h(
      "fieldset",
      {},
      h("legend", {}, "Chat"),
      chatBoxes.length === 0
        ? h(
          "p",
          { class: "empty" },
          "No chat destination yet: add a Slack, Discord, Teams or Telegram destination to a form.",
        )
        : chatBoxes,
      h("p", { class: "field-error", "data-error-for": "chat" }),
    ),
    h("fieldset", {}, h("legend", {}, "Operational webhook"), [
      field({
        label: "URL",
        path: "webhook.url",
        hint: "Receives each notification as JSON (type, timestamp, data). Empty: none.",
        input: webhookUrl,
      }),
      field({
        label: "Signing secret (Standard Webhooks)",
        path: "webhook.secret",
        hint: "Shown as ******** once stored: leave it so to keep it, empty it to stop signing.",
        input: webhookSecret,
      }),
      settings.webhook?.signed
        ? h(
          "div",
          { class: "actions" },
          rotateSecretControl({ path: "/notifications/webhook/rotate-secret", result: rotated }),
          overlapNote(settings.webhook.previousSecretValidUntil)
            ? h("p", { class: "hint" }, overlapNote(settings.webhook.previousSecretValidUntil))
            : null,
          rotated,
        )
        : null,
    ]),
    h("fieldset", {}, h("legend", {}, "Tell me when"), eventBoxes),
    field({ label: "Summary", path: "summary", input: summary }),
    h(
      "p",
      { class: "hint" },
      "At most one message per event and destination an hour; more are grouped. A channel is never told about its own failures.",
    ),
    formError(),
    h("button", { type: "submit", class: "primary" }, "Save"),
    " ",
    h("button", {
      type: "button",
      onclick: async () => {
        const { status, body } = await api("POST", "/notifications/test");
        saved.textContent = status === 200
          ? `A test was sent to ${body.queued} channel(s) of the saved settings: see "Sent lately" after a reload.`
          : `No test sent: ${body.error}`;
      },
    }, "Send a test"),
    saved,
  );

  return h(
    "section",
    {},
    h("h1", {}, "Notifications"),
    h(
      "p",
      {},
      "formrelay keeps no copy of your submissions: when one cannot be delivered, this is how you hear of it.",
    ),
    form,
    sentCard(sent),
  );
}

/** Each saved address: confirmed, or pending with a way to send its confirmation again. */
function showAddresses(list, addresses) {
  list.replaceChildren(...addresses.map((a) => addressItem(a)));
}

function addressItem(address) {
  const status = h("span", { class: "hint", role: "status" });
  const confirmed = address.state === "confirmed";
  const said = confirmed
    ? `confirmed ${when(address.confirmedAt)}`
    : address.error
    ? `not confirmed: the confirmation could not be sent (${address.error})`
    : address.sentAt
    ? `waiting for its owner to follow the link sent ${when(address.sentAt)}`
    : "waiting: no confirmation sent yet";
  const item = h(
    "li",
    {},
    h(
      "span",
      { class: `badge ${confirmed ? "delivered" : "held"}` },
      confirmed ? "Confirmed" : "Pending",
    ),
    " ",
    h("strong", {}, address.address),
    " ",
    h("span", { class: "hint" }, said),
    " ",
    confirmed ? null : h("button", {
      type: "button",
      onclick: async () => {
        const { status: code, body } = await api("POST", "/notifications/email/confirmation", {
          address: address.address,
        });
        if (code === 200) return item.replaceWith(addressItem(body.address));
        status.textContent = body.retryAfter
          ? `${body.error} (in ${Math.ceil(body.retryAfter / 60)} min)`
          : body.error;
      },
    }, "Send the confirmation again"),
    " ",
    status,
  );
  return item;
}

/** What was sent lately. */
function sentCard(sent) {
  return h(
    "div",
    { class: "card", role: "region", "aria-label": "Sent notifications" },
    h("h2", {}, "Sent lately"),
    sent.length === 0 ? h("p", { class: "empty" }, "Nothing sent in the last 7 days.") : h(
      "table",
      { class: "deliveries sent" },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          ["When", "Event", "To", "Count", "Result"].map((t) => h("th", { scope: "col" }, t)),
        ),
      ),
      h(
        "tbody",
        {},
        sent.map((s) =>
          h(
            "tr",
            {},
            h("td", { "data-label": "When" }, when(s.at)),
            h("td", { "data-label": "Event" }, EVENT_NAMES[s.type] ?? s.type),
            h("td", { "data-label": "To" }, s.channel.kind),
            h("td", { "data-label": "Count" }, String(s.count)),
            h(
              "td",
              { "data-label": "Result" },
              h(
                "span",
                { class: s.delivered ? "badge delivered" : "badge failed" },
                s.delivered ? "sent" : "failed",
              ),
              s.error ? ` ${s.error}` : null,
            ),
          )
        ),
      ),
    ),
  );
}
