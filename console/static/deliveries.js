/**
 * Delivery outcomes of a form: destinations paused for their health (with re-enable),
 * deliveries waiting for a retry (send all of a destination's now), a chart of the last
 * 24 hours, and the recent outcomes, filterable by status. "Send now" waits for the
 * attempt it starts and says how it ended.
 */
import { api, apiOk, deployment, destinationLabel, healthIssue, TYPE_NAMES } from "./api.js";
import { field, h, svg, when } from "./dom.js";
import { formHeader, loadForm, nowhereNotice } from "./forms.js";
import { noPageTokenHint, ruleTotals } from "./rules.js";

/** Outcomes read per visit: the API's most. */
const LIMIT = 500;
const STATUSES = ["delivered", "retrying", "held", "failed"];
const HOUR = 3600_000;
/** How long "Send now" waits for its attempt to end before asking for a refresh. */
const ATTEMPT_WAIT_MS = 30_000;
/** How often it looks meanwhile. */
const ATTEMPT_POLL_MS = 500;

/** Counts per hour of the last 24 h by submission time, oldest hour first. */
export function hourlyCounts(outcomes, now = Date.now()) {
  const start = now - 24 * HOUR;
  const hours = Array.from(
    { length: 24 },
    () => ({ delivered: 0, retrying: 0, held: 0, failed: 0 }),
  );
  for (const outcome of outcomes) {
    const at = Date.parse(outcome.submittedAt);
    if (at < start || at > now) continue;
    hours[Math.min(23, Math.floor((at - start) / HOUR))][outcome.status]++;
  }
  return hours;
}

/** A stacked bar chart of the last 24 h, with its numbers in its title for screen readers. */
function chart(outcomes) {
  const hours = hourlyCounts(outcomes);
  const totals = Object.fromEntries(
    STATUSES.map((s) => [s, hours.reduce((n, hour) => n + hour[s], 0)]),
  );
  const max = Math.max(1, ...hours.map((hour) => STATUSES.reduce((n, s) => n + hour[s], 0)));
  const width = 480, height = 120, barWidth = width / 24;
  const bars = hours.flatMap((hour, index) => {
    let y = height;
    return STATUSES.map((status) => {
      const barHeight = (hour[status] / max) * (height - 10);
      y -= barHeight;
      return barHeight > 0
        ? svg("rect", {
          class: `bar ${status}`,
          x: index * barWidth + 1,
          y,
          width: barWidth - 2,
          height: barHeight,
        })
        : null;
    });
  });
  const summary = STATUSES.map((s) => `${totals[s]} ${s}`).join(", ");
  return h(
    "figure",
    { class: "card chart" },
    svg(
      "svg",
      { viewBox: `0 0 ${width} ${height + 14}`, role: "img", "aria-labelledby": "chart-title" },
      svg("title", { id: "chart-title" }, `Deliveries in the last 24 hours: ${summary}`),
      svg("line", { class: "axis", x1: 0, x2: width, y1: height, y2: height }),
      bars,
      svg("text", { x: 0, y: height + 12, class: "tick" }, "24 h ago"),
      svg("text", { x: width, y: height + 12, class: "tick", "text-anchor": "end" }, "now"),
    ),
    h(
      "figcaption",
      {},
      "Last 24 hours: ",
      STATUSES.map((s) => h("span", { class: `legend ${s}` }, `${totals[s]} ${s}`)),
      outcomes.length >= LIMIT ? ` (from the latest ${LIMIT} outcomes)` : null,
    ),
  );
}

/** Each reason a submission did not reach the destinations, and what to do about it. */
const REFUSALS = [
  [
    "nowhere",
    "Sent nowhere",
    "Accepted while the form had no enabled destination, or matching no destination's conditions.",
  ],
  [
    "origin",
    "Wrong website",
    "Posted from a page whose address is not in Allowed origins (Settings); a page posting " +
    "with fetch is refused before it sends anything.",
  ],
  ["captcha", "Captcha", "No captcha token, or one the captcha service did not accept."],
  [
    "captcha_unavailable",
    "Captcha service down",
    "The captcha service could not be reached or failed: not the visitor's fault, they were " +
    "asked to try again. If it lasts, check the provider's status page.",
  ],
  [
    "spam",
    "Blocked as spam",
    "The honeypot field was filled in, or one of the form's spam rules caught it (Settings); " +
    "by rule below.",
  ],
  ["rate_limit", "Too many", "One visitor sent more than the rate limit allows."],
  ["size", "Too large", "The body was over 128 KB."],
  [
    "type",
    "Wrong format",
    "Posted in a format this service does not take (the page's form or script sets it): " +
    "the page needs fixing.",
  ],
  ["invalid", "Unreadable", "The body could not be read as the form's data (or had a file)."],
  [
    "backlog",
    "Service full",
    "Too many of your submissions were waiting for delivery (a slow or paused destination): " +
    "the visitor was asked to try again later.",
  ],
  [
    "busy",
    "Service busy",
    "The service was too busy to read or check it: the visitor was asked to try again later.",
  ],
  [
    "store_failed",
    "Not stored",
    "The service could not store it: the visitor was asked to try again.",
  ],
];

/**
 * What never reached the destinations, per reason: today and the last 7 days. Counts
 * only: formrelay keeps nothing of these submissions.
 */
function refusalsCard(form, { days, refusedOrigins }, say) {
  const today = days.at(-1);
  const total = (reason) => days.reduce((n, day) => n + day[reason], 0);
  const rows = REFUSALS.filter(([reason]) => total(reason) > 0);
  return h(
    "div",
    { class: "card", role: "region", "aria-label": "Not delivered" },
    h("h2", {}, "Not delivered"),
    rows.length === 0 ? h("p", { class: "empty" }, "Nothing was refused in the last 7 days.") : h(
      "table",
      { class: "deliveries refusals" },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          ["Reason", "Today", "7 days", "What it means"].map((t) => h("th", { scope: "col" }, t)),
        ),
      ),
      h(
        "tbody",
        {},
        rows.map(([reason, label, meaning]) =>
          h(
            "tr",
            { "data-reason": reason },
            h("td", { "data-label": "Reason" }, label),
            h("td", { "data-label": "Today" }, String(today[reason])),
            h("td", { "data-label": "7 days" }, String(total(reason))),
            h("td", { "data-label": "What it means" }, meaning),
          )
        ),
      ),
    ),
    refusedSites(form, refusedOrigins, say),
    spamByRule(days),
    h("p", { class: "hint" }, "Counts only: nothing of these submissions is kept."),
  );
}

/**
 * The last sites refused for their origin (a page posting with fetch is refused at its
 * CORS preflight, so its owner sees no message at all), each with one click to allow it.
 */
function refusedSites(form, refusedOrigins, say) {
  const sites = refusedOrigins.filter(({ origin }) => !form.allowedOrigins.includes(origin));
  if (sites.length === 0) return null;
  const allow = async (origin) => {
    const allowedOrigins = [...form.allowedOrigins, origin];
    const { status, body } = await api("PATCH", `/forms/${form.id}`, { allowedOrigins });
    const ok = status === 200;
    if (ok) form.allowedOrigins = allowedOrigins;
    say(ok ? `${origin} is now an allowed origin: its posts are taken.` : body.error, ok);
  };
  return h(
    "div",
    { class: "refused-origins" },
    h("p", { class: "meta" }, "Sites refused as a wrong website (latest first):"),
    h(
      "ul",
      {},
      sites.map(({ origin, lastSeen }) =>
        h(
          "li",
          { "data-origin": origin },
          h("code", {}, origin),
          ` last ${new Date(lastSeen).toLocaleString()} `,
          h("button", { type: "button", onclick: () => allow(origin) }, "Allow this site"),
        )
      ),
    ),
  );
}

/** Spam split by the rule that caught it, what observed rules would have, and the page-token hint. */
function spamByRule(days) {
  const caught = ruleTotals(days, "spamByRule");
  const observed = ruleTotals(days, "observedByRule");
  const spam = days.reduce((n, day) => n + day.spam, 0);
  const byRules = Object.values(caught.totals).reduce((n, count) => n + count, 0);
  const parts = [
    spam > byRules ? `Honeypot ${spam - byRules}` : null,
    caught.text || null,
  ].filter(Boolean);
  return [
    parts.length
      ? h("p", { class: "meta spam-rules" }, `Spam by rule, 7 days: ${parts.join(", ")}.`)
      : null,
    noPageTokenHint(caught.totals.no_page_token, { observed: false }),
    observed.text
      ? h(
        "p",
        { class: "meta observed" },
        `Rules in observe mode would have caught, 7 days (all delivered): ${observed.text}.`,
      )
      : null,
    noPageTokenHint(observed.totals.no_page_token, { observed: true }),
  ];
}

function healthAlerts(form, destinations, reload) {
  const flagged = destinations.map((d) => [d, healthIssue(d)]).filter(([, issue]) => issue);
  if (flagged.length === 0) return null;
  return h(
    "div",
    { class: "card alert", role: "region", "aria-label": "Destinations needing attention" },
    h("h2", {}, "Needs attention"),
    h(
      "ul",
      {},
      flagged.map(([destination, issue]) =>
        h(
          "li",
          {},
          h("strong", {}, destinationLabel(destination)),
          h("p", { class: "health" }, issue.text),
          h("button", {
            type: "button",
            onclick: async () => {
              await apiOk("POST", `/forms/${form.id}/destinations/${destination.id}/resume`);
              reload();
            },
          }, "Resume"),
        )
      ),
    ),
  );
}

/**
 * Looks at the form's deliveries until every one named in `before` (deliveryId → its
 * outcome when sent) has had its attempt (more attempts, or no longer retrying), or the
 * wait ends. Returns the outcomes that ended, by deliveryId.
 */
async function attemptsEnded(form, before) {
  const ended = new Map();
  const deadline = Date.now() + ATTEMPT_WAIT_MS;
  while (ended.size < before.size && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, ATTEMPT_POLL_MS));
    const { deliveries } = await apiOk("GET", `/forms/${form.id}/deliveries?limit=${LIMIT}`);
    for (const outcome of deliveries) {
      const sent = before.get(outcome.deliveryId);
      if (sent === undefined) continue;
      if (outcome.status !== "retrying" || outcome.attempts > sent.attempts) {
        ended.set(outcome.deliveryId, outcome);
      }
    }
  }
  return ended;
}

/** How one attempt ended, in a sentence. */
function attemptResult(outcome) {
  const code = outcome.lastStatusCode
    ? ` (${outcome.destinationType === "smtp" ? "SMTP" : "HTTP"} ${outcome.lastStatusCode})`
    : "";
  if (outcome.status === "delivered") return `Delivered${code}.`;
  if (outcome.status === "held") return "Held: its destination is paused.";
  const error = outcome.lastError ?? "unknown error";
  if (outcome.status === "failed") return `The attempt failed${code}: ${error}. No retry is left.`;
  return `The attempt failed${code}: ${error}. Next attempt ${when(outcome.nextAttemptAt)}.`;
}

/**
 * "Send now" of one delivery: made due, then its attempt waited for (ATTEMPT_WAIT_MS at
 * most) so the answer is how it went, not that it will start.
 */
async function sendNow(form, outcome, say) {
  const { status, body } = await api(
    "POST",
    `/forms/${form.id}/deliveries/${encodeURIComponent(outcome.deliveryId)}/send-now`,
  );
  if (status !== 200) return say(`Send now: ${body.error}`, false);
  say("Sending now…", true, { pending: true });
  const ended = (await attemptsEnded(form, new Map([[outcome.deliveryId, outcome]])))
    .get(outcome.deliveryId);
  if (ended === undefined) {
    return say(
      "Sent now, but the attempt has not ended after 30 seconds: Refresh to see it.",
      true,
    );
  }
  say(`Sent now. ${attemptResult(ended)}`, ended.status === "delivered");
}

/**
 * Deliveries waiting for a retry, per destination, with "Send all waiting now": after a
 * fix, nothing need wait out its backoff. Their attempts are waited for, as for one.
 */
function waitingCard(form, destinations, deliveries, say) {
  const byDestination = new Map();
  for (const outcome of deliveries) {
    if (outcome.status !== "retrying" || outcome.destinationId === "confirmation") continue;
    const waiting = byDestination.get(outcome.destinationId) ?? [];
    waiting.push(outcome);
    byDestination.set(outcome.destinationId, waiting);
  }
  const rows = destinations.filter((d) => byDestination.has(d.id) && !healthIssue(d));
  if (rows.length === 0) return null;
  return h(
    "div",
    { class: "card", role: "region", "aria-label": "Waiting for a retry" },
    h("h2", {}, "Waiting for a retry"),
    h(
      "ul",
      { class: "waiting" },
      rows.map((destination) => {
        const waiting = byDestination.get(destination.id);
        return h(
          "li",
          {},
          h("strong", {}, destinationLabel(destination)),
          ` — ${waiting.length} ${waiting.length === 1 ? "delivery waits" : "deliveries wait"} ` +
            "for a retry. ",
          h("button", {
            type: "button",
            onclick: async (event) => {
              event.currentTarget.disabled = true;
              const { status, body } = await api(
                "POST",
                `/forms/${form.id}/destinations/${destination.id}/send-now`,
              );
              if (status !== 200) return say(`Send all waiting now: ${body.error}`, false);
              say(`Sending ${body.sent} now…`, true, { pending: true });
              const before = new Map(waiting.map((o) => [o.deliveryId, o]));
              const ended = [...(await attemptsEnded(form, before)).values()];
              const delivered = ended.filter((o) => o.status === "delivered").length;
              const failed = ended.length - delivered;
              const open = before.size - ended.length;
              say(
                `Sent ${body.sent} now: ${delivered} delivered` +
                  (failed > 0 ? `, ${failed} failed again` : "") +
                  (open > 0 ? `, ${open} not ended after 30 seconds (Refresh to see them)` : "") +
                  ".",
                failed === 0 && open === 0,
              );
            },
          }, "Send all waiting now"),
        );
      }),
    ),
  );
}

/**
 * What can be done with one delivery: "Send now" while it waits for its next retry,
 * "Redeliver" once it is held (paused destination) or failed (only where the service keeps
 * failed submissions: `retainsFailed`). `say(text, ok)` reports the answer.
 */
function rowActions(form, outcome, { say, retainsFailed }) {
  if (outcome.status === "retrying") {
    return h(
      "div",
      { class: "row-actions" },
      h("button", {
        type: "button",
        onclick: async (event) => {
          event.currentTarget.disabled = true;
          await sendNow(form, outcome, say);
        },
      }, "Send now"),
    );
  }
  if (outcome.status !== "held" && !(outcome.status === "failed" && retainsFailed)) return null;
  return h(
    "div",
    { class: "row-actions" },
    h("button", {
      type: "button",
      onclick: async (event) => {
        event.currentTarget.disabled = true;
        const { status, body } = await api(
          "POST",
          `/forms/${form.id}/deliveries/${encodeURIComponent(outcome.deliveryId)}/redeliver`,
        );
        say(status === 200 ? "Redelivery started." : `Redeliver: ${body.error}`, status === 200);
      },
    }, "Redeliver"),
  );
}

function outcomeRows(outcomes, destinations, actions) {
  const byId = new Map(destinations.map((d) => [d.id, d]));
  const cell = (label, ...content) => h("td", { "data-label": label }, ...content);
  return outcomes.map((outcome) => {
    const destination = byId.get(outcome.destinationId);
    const error = [
      outcome.lastStatusCode
        ? `${outcome.destinationType === "smtp" ? "SMTP" : "HTTP"} ${outcome.lastStatusCode}`
        : null,
      outcome.lastError,
      outcome.detail,
    ].filter(Boolean).join(" — ");
    return h(
      "tr",
      { "data-status": outcome.status },
      cell("Submitted", when(outcome.submittedAt)),
      cell(
        "Destination",
        outcome.destinationId === "confirmation"
          ? "Confirmation to the visitor"
          : destination
          ? destinationLabel(destination)
          : `${TYPE_NAMES[outcome.destinationType]} (deleted)`,
      ),
      cell("Status", h("span", { class: `badge ${outcome.status}` }, outcome.status)),
      cell("Attempts", String(outcome.attempts)),
      cell(
        "Details",
        error || "—",
        outcome.nextAttemptAt
          ? h("span", { class: "hint" }, ` Next attempt ${when(outcome.nextAttemptAt)}`)
          : null,
        actions(outcome),
      ),
    );
  });
}

/** The deliveries page of a form. */
export async function deliveriesView(id) {
  const form = await loadForm(id);
  // Outside the part that reloads, so the answer to an action stays readable.
  const notice = h("p", { class: "test-outcome", role: "status" });
  const section = h("section", {}, formHeader(form, "deliveries"), notice);
  const body = h("div", {});
  section.append(body);
  // An action's answer; a pending one ("Sending now…") leaves the page as it is.
  const say = (text, ok, { pending = false } = {}) => {
    notice.textContent = text;
    notice.className = `test-outcome ${pending ? "" : ok ? "ok" : "bad"}`;
    if (!pending) reload();
  };
  const filter = h(
    "select",
    {},
    h("option", { value: "" }, "All"),
    STATUSES.map((s) => h("option", { value: s }, s)),
  );

  async function reload() {
    const [{ destinations }, { deliveries }, refusals, { retainsFailed }] = await Promise.all([
      apiOk("GET", `/forms/${form.id}/destinations`),
      apiOk("GET", `/forms/${form.id}/deliveries?limit=${LIMIT}`),
      apiOk("GET", `/forms/${form.id}/refusals?days=7`),
      deployment(),
    ]);
    const tbody = h("tbody", {});
    const render = () => {
      const shown = deliveries.filter((o) => !filter.value || o.status === filter.value);
      tbody.replaceChildren(
        ...outcomeRows(
          shown,
          destinations,
          (outcome) => rowActions(form, outcome, { say, retainsFailed }),
        ),
      );
      count.textContent = `${shown.length} of ${deliveries.length}`;
    };
    const count = h("span", { class: "hint", role: "status" });
    filter.onchange = render;
    body.replaceChildren(
      nowhereNotice(form, destinations) ?? "",
      healthAlerts(form, destinations, reload) ?? "",
      waitingCard(form, destinations, deliveries, say) ?? "",
      chart(deliveries),
      refusalsCard(form, refusals, say),
      h(
        "div",
        { class: "card" },
        h(
          "div",
          { class: "title-row" },
          h("h2", {}, "Recent deliveries"),
          h(
            "div",
            { class: "filters" },
            field({ label: "Status", path: "status", input: filter }),
            count,
            h("button", { type: "button", onclick: reload }, "Refresh"),
          ),
        ),
        deliveries.length === 0
          ? h(
            "p",
            { class: "empty" },
            "No deliveries yet. Outcomes appear here once submissions arrive.",
          )
          : h(
            "table",
            { class: "deliveries" },
            h(
              "thead",
              {},
              h(
                "tr",
                {},
                ["Submitted", "Destination", "Status", "Attempts", "Details"].map((t) =>
                  h("th", { scope: "col" }, t)
                ),
              ),
            ),
            tbody,
          ),
      ),
    );
    render();
  }
  await reload();
  return section;
}
