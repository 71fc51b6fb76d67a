/**
 * Destinations of a form: list, add and edit with the fields of each type, enable and
 * disable, delete, and send a test. The API checks every config; its errors are shown
 * beside the field they concern.
 */
import { api, apiOk, deployment, healthIssue, SignedOut, targetOf, TYPE_NAMES } from "./api.js";
import { clearErrors, confirmDialog, field, formError, h, showErrors, when } from "./dom.js";
import { formHeader, loadForm } from "./forms.js";
import { conditionsField, formatConditions } from "./rules.js";

/** What the API shows instead of a stored secret. */
const REDACTED = "********";

/** The kinds of destination a person picks from (both SMTP variants are type "smtp"). */
const KINDS = {
  webhook: "Webhook",
  sheets_webhook: "Spreadsheet app (e.g. Google Apps Script)",
  smtp_relay: "Email through your SMTP server",
  smtp_platform: "Email through this service's relay",
};

/** The kinds this deployment supports: the platform relay only where the host configured one. */
function offeredKinds({ platformRelay }) {
  return Object.keys(KINDS).filter((kind) => kind !== "smtp_platform" || platformRelay);
}

function kindOf(destination) {
  if (destination.type !== "smtp") return destination.type;
  return destination.config.host ? "smtp_relay" : "smtp_platform";
}

const select = (options, value) =>
  h(
    "select",
    {},
    options.map((option) => h("option", { value: option, selected: option === value }, option)),
  );
const text = (value, type = "text") =>
  h("input", { type, value: value ?? "", spellcheck: "false" });
const secret = () =>
  h("input", { type: "password", autocomplete: "new-password", spellcheck: "false" });
const lines = (value) => {
  const area = h("textarea", { rows: 3, spellcheck: "false" });
  area.value = value;
  return area;
};
const splitList = (value) => value.split(/[\s,;]+/).filter(Boolean);

/** A secret input's hint: stored secrets are never shown, so editing means typing it again. */
function secretHint(stored, what) {
  return stored
    ? `A ${what} is stored and never shown. Type it again to keep it, or a new one.`
    : undefined;
}

/** Fields of each kind: the inputs and how to read a config from them. */
function configFields(kind, config = {}) {
  const stored = (value) => value !== undefined;
  if (kind === "webhook") {
    const url = text(config.url, "url");
    const method = select(["POST", "PUT", "PATCH"], config.method ?? "POST");
    const headers = lines(
      Object.keys(config.headers ?? {}).map((name) => `${name}: ${REDACTED}`).join("\n"),
    );
    const signing = secret();
    const generate = h("button", {
      type: "button",
      onclick: () => {
        signing.type = "text";
        signing.value = `whsec_${
          btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(32))))
        }`;
      },
    }, "Generate a secret");
    return {
      fields: [
        field({ label: "URL", path: "config.url", input: url }),
        field({ label: "Method", path: "config.method", input: method }),
        field({
          label: "Headers",
          path: "config.headers",
          hint: `One "Name: value" per line, sent with every delivery.${
            stored(config.headers) && Object.keys(config.headers).length
              ? " Stored values are never shown: type them again."
              : ""
          }`,
          input: headers,
        }),
        field({
          label: "Signing secret (Standard Webhooks)",
          path: "config.secret",
          hint: secretHint(stored(config.secret), "signing secret") ??
            'Optional: "whsec_" and base64. Deliveries are then signed (webhook-signature header).',
          input: signing,
        }),
        h("p", {}, generate),
      ],
      read() {
        const pairs = splitHeaderLines(headers.value);
        return {
          url: url.value.trim(),
          method: method.value,
          headers: Object.fromEntries(pairs),
          ...(signing.value ? { secret: signing.value.trim() } : {}),
        };
      },
    };
  }
  if (kind === "sheets_webhook") {
    const url = text(config.url, "url");
    const method = select(["POST", "PUT"], config.method ?? "POST");
    const auth = secret();
    return {
      fields: [
        field({
          label: "Script web app URL",
          path: "config.url",
          hint: "The /exec address of the published script.",
          input: url,
        }),
        field({ label: "Method", path: "config.method", input: method }),
        field({
          label: "Authorization header",
          path: "config.authHeader",
          hint: secretHint(stored(config.authHeader), "header value") ??
            "Optional, sent as Authorization.",
          input: auth,
        }),
      ],
      read: () => ({
        url: url.value.trim(),
        method: method.value,
        ...(auth.value ? { authHeader: auth.value } : {}),
      }),
    };
  }
  const to = lines((config.to ?? []).join("\n"));
  const subject = text(config.subjectTemplate);
  const common = [
    field({ label: "Recipients", path: "config.to", hint: "One address per line.", input: to }),
    field({
      label: "Subject",
      path: "config.subjectTemplate",
      hint: "Optional. {{formName}} and {{submissionId}} are replaced.",
      input: subject,
    }),
  ];
  const readCommon = () => ({
    to: splitList(to.value),
    ...(subject.value.trim() ? { subjectTemplate: subject.value } : {}),
  });
  if (kind === "smtp_platform") return { fields: common, read: readCommon };
  const host = text(config.host);
  const port = text(config.port ?? 587, "number");
  const transport = select(["starttls", "on", "off"], config.secureTransport ?? "starttls");
  const username = text(config.username);
  const password = secret();
  const from = text(config.from, "email");
  return {
    fields: [
      field({ label: "SMTP host", path: "config.host", input: host }),
      field({
        label: "Port",
        path: "config.port",
        hint: "587 for STARTTLS, 465 for TLS.",
        input: port,
      }),
      field({
        label: "Secure transport",
        path: "config.secureTransport",
        hint: "starttls (587), on (TLS from the start, 465) or off (plain text).",
        input: transport,
      }),
      field({ label: "Username", path: "config.username", input: username }),
      field({
        label: "Password",
        path: "config.password",
        hint: secretHint(stored(config.password), "password"),
        input: password,
      }),
      field({ label: "From address", path: "config.from", input: from }),
      ...common,
    ],
    read: () => ({
      host: host.value.trim(),
      port: Number(port.value),
      secureTransport: transport.value,
      username: username.value,
      password: password.value,
      from: from.value.trim(),
      ...readCommon(),
    }),
  };
}

function splitHeaderLines(value) {
  return value.split("\n").map((line) => line.trim()).filter(Boolean).map((line) => {
    const colon = line.indexOf(":");
    return colon < 0 ? [line, ""] : [line.slice(0, colon).trim(), line.slice(colon + 1).trim()];
  });
}

/** The add/edit form of one destination; `destination` null adds one of `kind`. */
function editor({ formId, destination, kind, onDone }) {
  const { fields, read } = configFields(kind, destination?.config);
  const enabled = h("input", { type: "checkbox", checked: destination?.isEnabled ?? true });
  const routing = conditionsField(destination);
  const element = h(
    "form",
    {
      class: "card editor",
      novalidate: true,
      "aria-label": destination ? "Edit destination" : `New ${KINDS[kind]}`,
      onsubmit: async (event) => {
        event.preventDefault();
        clearErrors(element);
        const config = read();
        if (JSON.stringify(config).includes(REDACTED)) {
          return showErrors(element, {
            error: "Validation error",
            issues: [{ path: "config", message: "Type the stored secrets again" }],
          });
        }
        const type = kind.startsWith("smtp") ? "smtp" : kind;
        const { status, body } = destination
          ? await api("PATCH", `/forms/${formId}/destinations/${destination.id}`, {
            config,
            isEnabled: enabled.checked,
            conditions: routing.read(),
          })
          : await api("POST", `/forms/${formId}/destinations`, {
            type,
            config,
            isEnabled: enabled.checked,
            conditions: routing.read(),
          });
        if (status !== 200) return showErrors(element, body);
        onDone();
      },
    },
    h("h2", {}, destination ? `Edit ${KINDS[kind].toLowerCase()}` : `New: ${KINDS[kind]}`),
    fields,
    routing.field,
    field({ label: "Enabled", path: "isEnabled", input: enabled }),
    formError(),
    h(
      "div",
      { class: "actions" },
      h("button", { type: "submit", class: "primary" }, destination ? "Save" : "Add destination"),
      h("button", { type: "button", onclick: onDone }, "Cancel"),
    ),
  );
  return element;
}

/**
 * The last test send's outcome per destination id, kept while the page is open: the list
 * redraws after every change, and a result read a moment ago must not vanish with it.
 */
const testResults = new Map();

/** A destination's state in one badge: paused (by formrelay), disabled (by you) or enabled. */
function statusBadge(destination) {
  if (healthIssue(destination)) return h("span", { class: "badge paused" }, "Paused");
  return destination.isEnabled
    ? h("span", { class: "badge ok" }, "Enabled")
    : h("span", { class: "badge off" }, "Disabled");
}

/** A datetime-local input's value for a time (the reader's local time). */
function localInputValue(ms) {
  const date = new Date(ms - new Date(ms).getTimezoneOffset() * 60_000);
  return date.toISOString().slice(0, 16);
}

/**
 * Ways to get submissions through again: Resume for a paused destination (delivers what
 * it holds), and redelivery of everything since a time (held, or failed and retained).
 */
function recoveryActions(form, destination, { refresh, say }) {
  const base = `/forms/${form.id}/destinations/${destination.id}`;
  const resume = healthIssue(destination)
    ? h("button", {
      type: "button",
      class: "primary",
      onclick: async () => {
        const { released } = await apiOk("POST", `${base}/resume`);
        testResults.set(destination.id, {
          text: `Resumed: ${released} held submission${released === 1 ? "" : "s"} sent again.`,
          ok: true,
        });
        refresh();
      },
    }, "Resume")
    : null;
  const since = h("input", {
    type: "datetime-local",
    value: localInputValue(Date.now() - 24 * 3600_000),
    "aria-label": "Redeliver submissions since",
  });
  const redeliver = h("button", {
    type: "button",
    onclick: async () => {
      const { status, body } = await api("POST", `${base}/redeliver`, {
        since: new Date(since.value).toISOString(),
      });
      if (status !== 200) return say(`Not redelivered: ${body.error}`, false);
      const parts = [`${body.redelivered} redelivered`];
      if (body.underWay) parts.push(`${body.underWay} already under way`);
      if (body.expired) parts.push(`${body.expired} no longer held`);
      say(`Redelivery since ${since.value.replace("T", " ")}: ${parts.join(", ")}.`, true);
    },
  }, "Redeliver since");
  return [resume, h("span", { class: "since" }, redeliver, " ", since)];
}

/** A test send's outcome in words. */
function testOutcome(result) {
  const code = result.statusCode ? ` (${result.statusCode})` : "";
  return result.delivered
    ? `Test delivered${code} in ${result.ms} ms${result.detail ? `: ${result.detail}` : ""}`
    : `Test failed${code}: ${result.error}${result.detail ? ` — ${result.detail}` : ""}`;
}

/** A destination's pace in words: in flight of its concurrency, a hold, a rate. */
function paceText(pace) {
  const parts = [`Pace: ${pace.inFlight} of ${pace.concurrency} in flight`];
  if (pace.heldUntil) parts.push(`held until ${when(pace.heldUntil)} (the receiver asked to wait)`);
  if (pace.ratePerSecond !== null) parts.push(`at most ${pace.ratePerSecond} a second`);
  return parts.join(", ");
}

function destinationCard(form, destination, refresh, openEditor) {
  const outcome = h("p", { class: "test-outcome", role: "status" });
  // Shown again after a redraw; every new result is kept for the next one.
  const say = (text, ok) => {
    testResults.set(destination.id, { text, ok });
    outcome.textContent = text;
    outcome.className = `test-outcome ${ok ? "ok" : "bad"}`;
  };
  const kept = testResults.get(destination.id);
  if (kept) say(kept.text, kept.ok);
  const issue = healthIssue(destination);
  const base = `/forms/${form.id}/destinations/${destination.id}`;
  return h(
    "li",
    { class: "card", "data-destination": destination.id },
    h(
      "div",
      { class: "title-row" },
      h(
        "h2",
        {},
        TYPE_NAMES[destination.type],
        " ",
        h("span", { class: "target" }, targetOf(destination)),
      ),
      statusBadge(destination),
    ),
    issue
      ? h(
        "p",
        { class: "health", role: "note" },
        `${issue.label} since ${when(issue.since)}: ${issue.reason}`,
      )
      : null,
    destination.conditions?.length
      ? h(
        "p",
        { class: "meta" },
        "Only when: ",
        h("code", {}, formatConditions(destination.conditions).replaceAll("\n", " · ")),
      )
      : null,
    destination.pace ? h("p", { class: "pace" }, paceText(destination.pace)) : null,
    h(
      "div",
      { class: "actions" },
      recoveryActions(form, destination, { refresh, say }),
      h("button", {
        type: "button",
        onclick: async (event) => {
          const button = event.currentTarget;
          button.disabled = true;
          outcome.className = "test-outcome";
          outcome.textContent = "Sending a test…";
          try {
            const { result } = await apiOk("POST", `${base}/test`);
            say(testOutcome(result), result.delivered);
          } catch (error) {
            say(`Test not sent: ${error.message}`, false);
            if (error instanceof SignedOut) throw error;
          } finally {
            button.disabled = false;
          }
        },
      }, "Send test"),
      h("button", { type: "button", onclick: () => openEditor(destination) }, "Edit"),
      h("button", {
        type: "button",
        onclick: async () => {
          await apiOk("PATCH", base, { isEnabled: !destination.isEnabled });
          refresh();
        },
      }, destination.isEnabled ? "Disable" : "Enable"),
      h("button", {
        type: "button",
        class: "danger",
        onclick: async () => {
          const yes = await confirmDialog({
            title: "Delete this destination?",
            message: `${TYPE_NAMES[destination.type]} ${
              targetOf(destination)
            } will receive no more submissions.`,
            action: "Delete destination",
          });
          if (!yes) return;
          await apiOk("DELETE", base);
          refresh();
        },
      }, "Delete"),
    ),
    outcome,
  );
}

/** The destinations page of a form. */
export async function destinationsView(id) {
  const [form, offered] = await Promise.all([loadForm(id), deployment().then(offeredKinds)]);
  const section = h("section", {}, formHeader(form, "destinations"));
  const body = h("div", {});
  section.append(body);

  async function refresh() {
    const { destinations } = await apiOk("GET", `/forms/${form.id}/destinations`);
    const picker = select(offered, "webhook");
    for (const option of picker.options) option.textContent = KINDS[option.value];
    const slot = h("div", {});
    const openEditor = (destination, kind = kindOf(destination)) => {
      slot.replaceChildren(editor({ formId: form.id, destination, kind, onDone: refresh }));
      slot.querySelector("input, select, textarea")?.focus();
    };
    body.replaceChildren(
      destinations.length === 0
        ? h("p", { class: "empty" }, "No destinations yet: submissions to this form go nowhere.")
        : h(
          "ul",
          { class: "list" },
          destinations.map((d) => destinationCard(form, d, refresh, openEditor)),
        ),
      h(
        "div",
        { class: "card add" },
        field({ label: "Add a destination", path: "kind", input: picker }),
        h("button", {
          type: "button",
          class: "primary",
          onclick: () => openEditor(null, picker.value),
        }, "Add…"),
      ),
      slot,
    );
  }
  await refresh();
  return section;
}
