/**
 * The cost of the worst template a tenant can save, in process (no server): a template
 * naming one field as often as its 4 096 characters allow (`{{fields.x}}` 341 times)
 * with a 128 KB value of `&` (the escape that grows most), rendered as each chat
 * service's message and as a digest of 10, and as an email subject. Prints the median
 * and slowest milliseconds of a fixed number of runs, and the size of what would be
 * sent. Bounded: it stops after its runs.
 *
 *     deno task bench:templates
 */
import { discordDigest, discordMessage } from "../connectors/chat/discord.ts";
import { slackDigest, slackMessage } from "../connectors/chat/slack.ts";
import { teamsDigest, teamsMessage } from "../connectors/chat/teams.ts";
import { telegramDigest, telegramMessage } from "../connectors/chat/telegram.ts";
import { renderSubject } from "../connectors/smtp/message.ts";
import type { SubmissionEnvelope } from "../submission.ts";

/** Runs of each case (BENCH_RUNS). */
const RUNS = Number(Deno.env.get("BENCH_RUNS") ?? 21);
const TEMPLATE = "{{fields.x}}".repeat(341);

const envelope: SubmissionEnvelope = {
  submissionId: "0b8f4a2e-1111-4222-8333-444455556666",
  formId: "form-1",
  formName: "Contact",
  payload: { x: "&".repeat(128 * 1024) },
  metadata: {
    origin: "https://site.example",
    ip: null,
    userAgent: null,
    referer: null,
    submittedAt: "2026-11-25T12:00:00.000Z",
  },
};
const digestOf10 = Array.from({ length: 10 }, () => envelope);
const config = { template: TEMPLATE, chatId: -1001234 };

/** Median and slowest milliseconds of RUNS calls, and the size of the last result as JSON. */
function measure(fn: () => unknown): { median: number; max: number; bytes: number } {
  const times: number[] = [];
  let result: unknown;
  for (let i = 0; i < RUNS; i++) {
    const start = performance.now();
    result = fn();
    times.push(performance.now() - start);
  }
  times.sort((a, b) => a - b);
  const bytes = new TextEncoder().encode(JSON.stringify(result)).length;
  return { median: times[Math.floor(RUNS / 2)], max: times[RUNS - 1], bytes };
}

console.log(
  `templates bench · ${navigator.hardwareConcurrency} cores · Deno ${Deno.version.deno} · ` +
    `${new Date().toISOString().slice(0, 10)} · ${RUNS} runs each`,
);
const cases: [string, () => unknown][] = [
  ["slack message", () => slackMessage(envelope, config)],
  ["slack digest of 10", () => slackDigest(digestOf10, config)],
  ["discord message", () => discordMessage(envelope, config)],
  ["discord digest of 10", () => discordDigest(digestOf10, config)],
  ["teams message", () => teamsMessage(envelope, config)],
  ["teams digest of 10", () => teamsDigest(digestOf10, config)],
  ["telegram message", () => telegramMessage(envelope, config)],
  ["telegram digest of 10", () => telegramDigest(digestOf10, config)],
  ["email subject", () => renderSubject(TEMPLATE, envelope)],
];
for (const [name, fn] of cases) {
  const { median, max, bytes } = measure(fn);
  console.log(
    `${name.padEnd(22)} median ${median.toFixed(2).padStart(8)} ms, ` +
      `slowest ${max.toFixed(2).padStart(8)} ms, ${bytes} bytes`,
  );
}
