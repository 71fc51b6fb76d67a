/**
 * Destinations of a form: list, add and edit with the fields of each type, enable and
 * disable, delete, and send a test. The API checks every config; its errors are shown
 * beside the field they concern.
 */
import { api, apiOk, deployment, healthIssue, SignedOut, targetOf, TYPE_NAMES } from "./api.js";
import { clearErrors, confirmDialog, field, formError, h, showErrors, when } from "./dom.js";
import { formHeader, loadForm } from "./forms.js";
import { messagePreview } from "./preview.js";
import { conditionsField, formatConditions } from "./rules.js";
import { overlapNote, rotateSecretControl } from "./rotation.js";

/** What the API shows instead of a stored secret. */
const REDACTED = "********";

/**
 * The editors a person picks from, by kind (both SMTP variants are type "smtp"), from
 * the deployment's destination types (`GET /deployment`, connectors/registry.ts).
 */
function editorsOf({ destinationTypes, platformRelay }) {
  const editors = new Map();
  for (const { type, editors: list } of destinationTypes) {
    for (const editor of list) {
      const offered = editor.requires !== "platformRelay" || platformRelay;
      editors.set(editor.kind, { ...editor, type, offered });
    }
  }
  return editors;
}

/** The editor of a stored destination: the one of its type whose `when` its config meets. */
function kindOf(editors, destination) {
  const config = destination.config ?? {};
  for (const [kind, editor] of editors) {
    if (editor.type !== destination.type) continue;
    if (editor.when?.has && !(editor.when.has in config)) continue;
    if (editor.when?.lacks && editor.when.lacks in config) continue;
    return kind;
  }
  return destination.type;
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
const lines = (value, rows = 3) => {
  const area = h("textarea", { rows, spellcheck: "false" });
  area.value = value;
  return area;
};
const splitList = (value) => value.split(/[\s,;]+/).filter(Boolean);

/** A secret input's hint: a stored secret is never shown, and kept unless replaced or removed. */
function secretHint(stored, what) {
  return stored
    ? `A ${what} is stored and never shown. Leave this empty to keep it, or type a new one.`
    : undefined;
}

/** A fresh Standard Webhooks secret. */
function whsec() {
  return `whsec_${btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(32))))}`;
}

/**
 * One input of an editor, from its description (connectors/descriptor.ts ConsoleField):
 * its elements and how to read its value (undefined leaves it out of the config).
 */
function inputOf(spec, value, isNew) {
  const path = `config.${spec.name}`;
  const stored = value !== undefined && !isNew;
  const extra = [];
  let input;
  let read;
  let hint = spec.help;
  if (spec.kind === "select") {
    input = select(spec.options, value ?? spec.options[0]);
    read = () => input.value;
  } else if (spec.kind === "secret" || (stored && value === REDACTED)) {
    const what = spec.label.toLowerCase();
    input = secret();
    hint = secretHint(stored, what) ?? hint;
    // Left out, the stored secret is kept (the API's rule); null removes it.
    const remove = stored && spec.optional ? h("input", { type: "checkbox" }) : null;
    if (remove) extra.push(h("label", { class: "check" }, remove, ` Remove the stored ${what}`));
    read = () => remove?.checked ? null : input.value ? input.value.trim() : undefined;
    if (spec.generate === "whsec") {
      const note = h("p", { class: "hint generated", role: "status" });
      extra.push(
        h(
          "p",
          {},
          h("button", {
            type: "button",
            onclick: () => {
              input.type = "text";
              input.value = whsec();
              note.textContent =
                "Copy it now: it will not be shown again. Your receiver needs it to check signatures.";
            },
          }, "Generate a secret"),
        ),
        note,
      );
    }
  } else if (spec.kind === "headers") {
    input = lines(Object.keys(value ?? {}).map((name) => `${name}: ${REDACTED}`).join("\n"));
    if (stored && Object.keys(value).length) {
      hint += ` Stored values show as ${REDACTED}: leave them so to keep them.`;
    }
    read = () => Object.fromEntries(splitHeaderLines(input.value));
  } else if (spec.kind === "list") {
    input = lines((value ?? []).join("\n"));
    read = () => splitList(input.value);
  } else if (spec.kind === "template") {
    input = lines(value ?? "", 5);
    read = () => input.value.trim() ? input.value : undefined;
  } else {
    const type = spec.kind === "text" ? "text" : spec.kind;
    input = text(value ?? spec.initial, type);
    read = () => {
      const raw = input.value.trim();
      if (spec.kind === "number") return Number(raw);
      if (spec.numeric && /^-?\d+$/.test(raw)) return Number(raw);
      return raw;
    };
  }
  const readValue = () => {
    const result = read();
    return spec.optional && (result === "" || result === undefined) ? undefined : result;
  };
  return { elements: [field({ label: spec.label, path, hint, input }), ...extra], read: readValue };
}

/** The inputs of an editor and how to read a config from them. */
function configFields(editor, config, isNew) {
  const inputs = editor.fields.map((
    spec,
  ) => [spec.name, inputOf(spec, config?.[spec.name], isNew)]);
  return {
    fields: [
      editor.where ? h("p", { class: "hint where" }, editor.where) : null,
      ...inputs.flatMap(([, input]) => input.elements),
    ],
    read: () => {
      const config = {};
      for (const [name, input] of inputs) {
        const value = input.read();
        if (value !== undefined) config[name] = value;
      }
      return config;
    },
  };
}

function splitHeaderLines(value) {
  return value.split("\n").map((line) => line.trim()).filter(Boolean).map((line) => {
    const colon = line.indexOf(":");
    return colon < 0 ? [line, ""] : [line.slice(0, colon).trim(), line.slice(colon + 1).trim()];
  });
}

/** The add/edit form of one destination; `destination` null adds one of `kind`. */
function editor({ formId, destination, spec, onDone }) {
  const { fields, read } = configFields(spec, destination?.config, !destination);
  const name = h("input", { type: "text", maxlength: 100, value: destination?.name ?? "" });
  const enabled = h("input", { type: "checkbox", checked: destination?.isEnabled ?? true });
  const previewSlot = h("div", { class: "preview-slot", "aria-live": "polite" });
  const showPreview = async () => {
    clearErrors(element);
    const { status, body } = await api("POST", `/forms/${formId}/destinations/preview`, {
      type: spec.type,
      config: read(),
    });
    if (status !== 200) return showErrors(element, body);
    previewSlot.replaceChildren(
      h("p", { class: "hint" }, "A sample submission, as it would arrive:"),
      messagePreview(spec.type, body.message),
    );
  };
  const routing = conditionsField(destination);
  const element = h(
    "form",
    {
      class: "card editor",
      novalidate: true,
      "aria-label": destination ? "Edit destination" : `New ${spec.label}`,
      onsubmit: async (event) => {
        event.preventDefault();
        clearErrors(element);
        const config = read();
        const type = spec.type;
        const { status, body } = destination
          ? await api("PATCH", `/forms/${formId}/destinations/${destination.id}`, {
            name: name.value.trim() || null,
            config,
            isEnabled: enabled.checked,
            conditions: routing.read(),
          })
          : await api("POST", `/forms/${formId}/destinations`, {
            type,
            name: name.value.trim() || undefined,
            config,
            isEnabled: enabled.checked,
            conditions: routing.read(),
          });
        if (status !== 200) return showErrors(element, body);
        onDone();
      },
    },
    h("h2", {}, destination ? `Edit ${spec.label.toLowerCase()}` : `New: ${spec.label}`),
    field({
      label: "Name (optional)",
      path: "name",
      hint: 'Yours, to tell destinations apart: "Sales inbox", "Support channel".',
      input: name,
    }),
    fields,
    routing.field,
    field({ label: "Enabled", path: "isEnabled", input: enabled }),
    formError(),
    h(
      "div",
      { class: "actions" },
      h("button", { type: "submit", class: "primary" }, destination ? "Save" : "Add destination"),
      h("button", { type: "button", onclick: showPreview }, "Preview message"),
      h("button", { type: "button", onclick: onDone }, "Cancel"),
    ),
    previewSlot,
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
function recoveryActions(form, destination, { refresh, say, retainsFailed }) {
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
      const nothing = body.redelivered === 0 && !body.underWay
        ? " Delivered submissions are not kept, so there was nothing to send again."
        : "";
      say(
        `Redelivery since ${since.value.replace("T", " ")}: ${parts.join(", ")}.${nothing}`,
        true,
      );
    },
  }, "Redeliver since");
  return [
    resume,
    h("span", { class: "since" }, redeliver, " ", since),
    h("p", { class: "hint redeliver-hint" }, redeliverHint(retainsFailed)),
  ];
}

/** What redelivery can and cannot send again, on this deployment. */
function redeliverHint(retainsFailed) {
  const failed = retainsFailed
    ? "and submissions that failed for good while this service still keeps them"
    : "(this service keeps no failed submissions)";
  return "Redeliver sends again what this destination holds while paused " + failed +
    ". Delivered submissions are not kept, so they cannot be sent again.";
}

/** A test send's outcome in words. */
function testOutcome(result) {
  const code = result.statusCode ? ` (${result.statusCode})` : "";
  return result.delivered
    ? `Test delivered${code} in ${result.ms} ms${result.detail ? `: ${result.detail}` : ""}`
    : `Test failed${code}: ${result.error}${result.detail ? ` — ${result.detail}` : ""}`;
}

/**
 * A destination's pace in words, only while it is being slowed (the receiver asked to
 * wait, or refused for rate); null otherwise: a pace at full speed is nothing to read.
 */
function paceText(pace) {
  const held = pace.heldUntil !== null && Date.parse(pace.heldUntil) > Date.now();
  if (!held && pace.ratePerSecond === null) return null;
  const parts = [];
  if (held) {
    parts.push(`the receiver asked to wait, so nothing is sent before ${when(pace.heldUntil)}`);
  }
  if (pace.ratePerSecond !== null) {
    parts.push(
      `it answered "too many requests", so it gets at most ${pace.ratePerSecond} a second for now`,
    );
  }
  return `Slowed down: ${parts.join("; ")}.`;
}

/** Whether a destination's deliveries are signed or authenticated, from its stored secrets. */
function protectionText(destination) {
  const set = destination.secretsSet ?? [];
  if (destination.type === "webhook") {
    return set.includes("secret")
      ? [
        "Signing on: every delivery carries a webhook-signature.",
        overlapNote(
          destination.previousSecretValidUntil,
        ),
      ].filter(Boolean).join(" ")
      : "Signing off: add a secret to sign deliveries.";
  }
  if (destination.type === "sheets_webhook") {
    return set.includes("authHeader") ? "Authorization header set." : "No authorization header.";
  }
  return null;
}

function destinationCard(form, destination, { refresh, openEditor, retainsFailed }) {
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
  // The new signing secret, shown once; a redraw keeps it until the page is left.
  const rotated = h("div", { class: "rotated" });
  const shown = rotatedSecrets.get(destination.id);
  if (shown) rotated.append(shown);
  const signed = destination.type === "webhook" && destination.secretsSet?.includes("secret");
  return h(
    "li",
    { class: "card", "data-destination": destination.id },
    h(
      "div",
      { class: "title-row" },
      h(
        "h2",
        {},
        destination.name ? `${destination.name} · ` : "",
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
        issue.text,
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
    destination.pace && paceText(destination.pace)
      ? h("p", { class: "pace" }, paceText(destination.pace))
      : null,
    protectionText(destination) ? h("p", { class: "meta" }, protectionText(destination)) : null,
    h(
      "div",
      { class: "actions" },
      recoveryActions(form, destination, { refresh, say, retainsFailed }),
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
      signed
        ? rotateSecretControl({
          path: `${base}/rotate-secret`,
          result: rotated,
          onRotated: () => {
            rotatedSecrets.set(destination.id, rotated.firstChild);
            refresh();
          },
        })
        : null,
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
    rotated,
  );
}

/** New signing secrets shown on this page, by destination, until the page is left. */
const rotatedSecrets = new Map();

/** The destinations page of a form. */
export async function destinationsView(id) {
  rotatedSecrets.clear();
  const [form, { editors, retainsFailed }] = await Promise.all([
    loadForm(id),
    deployment().then((answer) => ({
      editors: editorsOf(answer),
      retainsFailed: answer.retainsFailed,
    })),
  ]);
  const offered = [...editors.keys()].filter((kind) => editors.get(kind).offered);
  const section = h("section", {}, formHeader(form, "destinations"));
  const body = h("div", {});
  section.append(body);

  async function refresh() {
    const { destinations } = await apiOk("GET", `/forms/${form.id}/destinations`);
    const picker = select(offered, "webhook");
    for (const option of picker.options) option.textContent = editors.get(option.value).label;
    const slot = h("div", {});
    const openEditor = (destination, kind = kindOf(editors, destination)) => {
      const spec = editors.get(kind);
      slot.replaceChildren(editor({ formId: form.id, destination, spec, onDone: refresh }));
      slot.querySelector("input, select, textarea")?.focus();
    };
    body.replaceChildren(
      destinations.length === 0
        ? h("p", { class: "empty" }, "No destinations yet: submissions to this form go nowhere.")
        : h(
          "ul",
          { class: "list" },
          destinations.map((d) => destinationCard(form, d, { refresh, openEditor, retainsFailed })),
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
