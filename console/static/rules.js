/**
 * A form's own rules in the console: its spam rules and confirmation to the visitor (on
 * the settings page), routing conditions (in each destination's editor) and the time
 * trap's lines for the snippets.
 */
import { field, h } from "./dom.js";

const lines = (text) => text.split("\n").map((line) => line.trim()).filter(Boolean);
const number = (input) => input.value.trim() === "" ? undefined : Number(input.value);

/** Each spam rule's name in the console, as the refusals count them (store/refusals.ts). */
export const RULE_NAMES = {
  no_page_token: "No page token",
  time_trap: "Too fast",
  links: "Too many links",
  blocked_words: "Blocked word",
  blocked_patterns: "Blocked pattern",
  disposable: "Throw-away address",
};

/** Counts per rule of several days added up, the non-zero ones as "Too fast 3, Blocked word 1". */
export function ruleTotals(days, key) {
  const totals = Object.keys(RULE_NAMES).map((rule) => [
    rule,
    days.reduce((n, day) => n + (day[key]?.[rule] ?? 0), 0),
  ]).filter(([, n]) => n > 0);
  return {
    totals: Object.fromEntries(totals),
    text: totals.map(([rule, n]) => `${RULE_NAMES[rule]} ${n}`).join(", "),
  };
}

/** The line that says a page sends no page token, and what to do, or null. */
export function noPageTokenHint(count, { observed }) {
  if (!count) return null;
  return h(
    "p",
    { class: "hint warn", role: "note" },
    `${count} submission${count === 1 ? "" : "s"} came without a page token` +
      (observed ? " (delivered: the rules are only observed)" : " and were dropped") +
      ". Pages on an older snippet, a plain HTML form or a script posting directly send none: " +
      "update the page with the snippet (Snippet tab), or leave Minimum seconds empty.",
  );
}

/**
 * The spam-rule fields of the settings editor, and how to read them back. `days` are the
 * form's refusals of the last days: with the rules in observe mode, what they would have
 * caught is shown before they are turned on.
 */
export function spamRuleFields(form, days = []) {
  const rules = form?.spamRules ?? {};
  const observe = h("input", { type: "checkbox", checked: rules.observe === true });
  const observed = ruleTotals(days, "observedByRule");
  const minSeconds = h("input", {
    type: "number",
    min: 1,
    max: 3600,
    value: rules.minSeconds ?? "",
  });
  const maxLinks = h("input", { type: "number", min: 0, max: 100, value: rules.maxLinks ?? "" });
  const words = h("textarea", { rows: 3 });
  words.value = (rules.blockedWords ?? []).join("\n");
  const patterns = h("textarea", { rows: 3 });
  patterns.value = (rules.blockedPatterns ?? []).join("\n");
  const disposable = h("input", { type: "text", value: rules.disposableEmailField ?? "" });
  const fields = h(
    "fieldset",
    {},
    h("legend", {}, "Spam rules"),
    h(
      "p",
      { class: "hint" },
      "Each is optional. A submission a rule catches is answered as if it was sent (the bot " +
        "learns nothing), is not delivered or kept, and is counted as spam below.",
    ),
    field({
      label: "Minimum seconds on the page",
      path: "spamRules.minSeconds",
      hint: "Needs the page-time lines of the snippet. Bots send within a second of loading.",
      input: minSeconds,
    }),
    field({
      label: "Most links",
      path: "spamRules.maxLinks",
      hint: "Links (http://, https://, www.) in all fields together. Empty: no limit.",
      input: maxLinks,
    }),
    field({
      label: "Blocked words",
      path: "spamRules.blockedWords",
      hint: "One word or phrase per line, any case, anywhere in the fields.",
      input: words,
    }),
    field({
      label: "Blocked patterns",
      path: "spamRules.blockedPatterns",
      hint: "One regular expression per line (simple ones only: no nested repeats), " +
        "matched against each field's first 1 000 characters.",
      input: patterns,
    }),
    field({
      label: "Refuse throw-away addresses in field",
      path: "spamRules.disposableEmailField",
      hint: "The field holding the visitor's email, e.g. email. Empty: not checked.",
      input: disposable,
    }),
    field({
      label: "Observe only (try the rules first)",
      path: "spamRules.observe",
      hint: "Every submission is delivered as usual; what each rule would have caught is " +
        "counted, per day, for 30 days. Untick it to let the rules drop spam.",
      input: observe,
    }),
    observed.text
      ? h(
        "p",
        { class: "hint observed", role: "status" },
        `In the last ${days.length} days these rules would have caught: ${observed.text}.`,
      )
      : null,
    noPageTokenHint(observed.totals.no_page_token, { observed: true }),
  );
  function read() {
    const spamRules = {
      minSeconds: number(minSeconds),
      maxLinks: number(maxLinks),
      blockedWords: lines(words.value),
      blockedPatterns: lines(patterns.value),
      disposableEmailField: disposable.value.trim() || undefined,
      observe: observe.checked || undefined,
    };
    if (!spamRules.blockedWords.length) delete spamRules.blockedWords;
    if (!spamRules.blockedPatterns.length) delete spamRules.blockedPatterns;
    const set = Object.values(spamRules).some((value) => value !== undefined);
    return set ? JSON.parse(JSON.stringify(spamRules)) : null;
  }
  return { fields, read };
}

/** The confirmation fields of the settings editor, and how to read them back. */
export function confirmationFields(form, { destinations, platformRelay }) {
  const setting = form?.confirmation ?? null;
  const on = h("input", { type: "checkbox", checked: setting !== null });
  const emailField = h("input", { type: "text", value: setting?.emailField ?? "email" });
  const subject = h("input", {
    type: "text",
    maxlength: 200,
    value: setting?.subject ?? "We received your message to {{formName}}",
  });
  const text = h("textarea", { rows: 4 });
  text.value = setting?.text ?? "Thank you: your message arrived and we will answer soon.";
  const echo = h("input", { type: "text", value: (setting?.echoFields ?? []).join(", ") });
  const replyTo = h("input", { type: "email", value: setting?.replyTo ?? "" });
  const relays = destinations.filter((d) => d.type === "smtp" && d.config.host);
  const via = h(
    "select",
    {},
    platformRelay ? h("option", { value: "platform" }, "This service's mail relay") : null,
    relays.map((d) =>
      h("option", { value: d.id }, `Your relay ${d.config.host} (from ${d.config.from})`)
    ),
  );
  via.value = setting?.via ?? (platformRelay ? "platform" : relays[0]?.id ?? "");
  const maxPerHour = h("input", {
    type: "number",
    min: 1,
    max: 1000,
    value: setting?.maxPerHour ?? 20,
  });
  const fields = h(
    "fieldset",
    {},
    h("legend", {}, "Confirmation to the visitor"),
    h(
      "p",
      { class: "hint" },
      "An email to the address the visitor typed, saying their message arrived. At most one " +
        "per mailbox a day (Ada+x@ and ada@ are one) and your hourly cap, never for spam or a " +
        "failed captcha: anyone can type anyone's address, so it must not be a way to mail " +
        "strangers.",
    ),
    field({ label: "Send a confirmation", path: "confirmation", input: on }),
    field({
      label: "Field with the visitor's address",
      path: "confirmation.emailField",
      input: emailField,
    }),
    field({
      label: "Subject",
      path: "confirmation.subject",
      hint: "{{formName}} is replaced by the form's name.",
      input: subject,
    }),
    field({
      label: "Text",
      path: "confirmation.text",
      hint: "Your own words, sent as plain text. {{formName}}, {{submittedAt}} work here.",
      input: text,
    }),
    field({
      label: "Fields to repeat to the visitor",
      path: "confirmation.echoFields",
      hint: "Comma-separated, e.g. name, topic. Only these are repeated, cut to 200 characters. " +
        "Empty: nothing the visitor wrote is sent back.",
      input: echo,
    }),
    field({
      label: "Reply-To",
      path: "confirmation.replyTo",
      hint: "Where the visitor's reply goes, e.g. your support address.",
      input: replyTo,
    }),
    field({ label: "Send through", path: "confirmation.via", input: via }),
    field({
      label: "Most confirmations per hour",
      path: "confirmation.maxPerHour",
      input: maxPerHour,
    }),
  );
  function read() {
    if (!on.checked) return null;
    const confirmation = {
      emailField: emailField.value.trim(),
      subject: subject.value,
      text: text.value,
      echoFields: echo.value.split(/[\s,]+/).filter(Boolean),
      via: via.value,
      maxPerHour: Number(maxPerHour.value),
    };
    if (replyTo.value.trim()) confirmation.replyTo = replyTo.value.trim();
    return confirmation;
  }
  return { fields, read };
}

/**
 * Routing conditions as lines people read and write: `topic = sales, pricing`,
 * `topic ~ ^(support|help)$`, `phone present`, `company absent`.
 */
export function formatConditions(conditions) {
  return (conditions ?? []).map((c) => {
    if (c.op === "equals") return `${c.field} = ${c.values.join(", ")}`;
    if (c.op === "matches") return `${c.field} ~ ${c.pattern}`;
    return `${c.field} ${c.op}`;
  }).join("\n");
}

/** Lines of formatConditions back into conditions; a line it cannot read is sent as is (and refused). */
export function parseConditions(text) {
  return lines(text).map((line) => {
    let m = /^(\S+)\s*=\s*(.+)$/.exec(line);
    if (m) return { field: m[1], op: "equals", values: m[2].split(",").map((v) => v.trim()) };
    m = /^(\S+)\s*~\s*(.+)$/.exec(line);
    if (m) return { field: m[1], op: "matches", pattern: m[2] };
    m = /^(\S+)\s+(present|absent)$/.exec(line);
    if (m) return { field: m[1], op: m[2] };
    return { field: line, op: "unreadable" };
  });
}

/** The routing field of a destination's editor. */
export function conditionsField(destination) {
  const input = h("textarea", { rows: 2 });
  input.value = formatConditions(destination?.conditions);
  return {
    field: field({
      label: "Only when",
      path: "conditions",
      hint: "One condition per line, all must hold: topic = sales, pricing · topic ~ ^support · " +
        "phone present · company absent. Empty: every submission.",
      input,
    }),
    read: () => parseConditions(input.value),
  };
}

/** The time trap's lines of a snippet, for a form with a minimum time on the page. */
export function timeTrapLines(endpoint, form) {
  if (!form.spamRules?.minSeconds) return "";
  return `
  <!-- When the page loaded, signed by formrelay: sent sooner than ${form.spamRules.minSeconds} s after it is dropped as spam -->
  <input type="hidden" name="_formrelay_loaded">
  <script>
    fetch("${endpoint}/page-token").then((r) => r.json()).then((answer) => {
      for (const input of document.querySelectorAll('input[name="_formrelay_loaded"]')) input.value = answer.token;
    });
  </script>`;
}
