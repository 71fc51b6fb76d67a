import assert from "node:assert/strict";
import { defaultSettings, type PendingEvent } from "../store/notifications.ts";
import { confirmedAddresses } from "../store/notify_confirmations.ts";
import { channelsFor } from "./channels.ts";
import { lastPeriod } from "./summary.ts";

const event = (over: Partial<PendingEvent>): PendingEvent => ({
  orgId: "org",
  type: "endpoint.disabled",
  subject: "chat-1",
  formId: "form",
  destinationId: "chat-1",
  count: 1,
  firstAt: 0,
  lastAt: 0,
  submissionIds: [],
  detail: null,
  held: null,
  dueAt: 0,
  ...over,
});

Deno.test("a channel is never told about itself; an event switched off goes nowhere", () => {
  const settings = {
    ...defaultSettings("off"),
    email: {
      to: ["o@example.org"],
      via: "smtp-1",
      confirmations: {
        "o@example.org": { confirmedAt: 1, sent: [0], tokenHash: null, error: null },
      },
    },
    chat: ["chat-1", "chat-2"],
    webhook: { url: "https://ops.example.com/x", secret: null },
  };
  assert.deepEqual(channelsFor(settings, event({})), [
    { kind: "email" },
    { kind: "chat", destinationId: "chat-2" },
    { kind: "webhook" },
  ]);
  assert.deepEqual(
    channelsFor(settings, event({ destinationId: "smtp-1", subject: "smtp-1" })).map((c) => c.kind),
    ["chat", "chat", "webhook"],
  );
  assert.deepEqual(channelsFor({ ...settings, events: [] }, event({})), []);
  assert.deepEqual(channelsFor(null, event({})), []);
  assert.deepEqual(channelsFor(settings, event({ type: "summary" })), [], "summary off");
});

Deno.test("email goes only to confirmed addresses: none confirmed, no email channel", () => {
  const pending = { confirmedAt: null, sent: [0], tokenHash: "t", error: null };
  const settings = {
    ...defaultSettings("off"),
    email: {
      to: ["a@example.org", "B@example.org"],
      via: "platform",
      confirmations: { "a@example.org": pending, "b@example.org": pending },
    },
  };
  assert.deepEqual(channelsFor(settings, event({ type: "test" })), []);
  assert.deepEqual(
    channelsFor(
      { ...settings, email: { to: ["a@example.org"], via: "platform" } },
      event({ type: "test" }),
    ),
    [],
    "settings stored before confirmations existed",
  );
  const confirmed = { ...pending, confirmedAt: 5, tokenHash: null };
  const one = {
    ...settings,
    email: {
      ...settings.email,
      confirmations: { ...settings.email.confirmations, "b@example.org": confirmed },
    },
  };
  assert.deepEqual(channelsFor(one, event({ type: "test" })), [{ kind: "email" }]);
  assert.deepEqual(confirmedAddresses(one.email), ["B@example.org"]);
});

Deno.test("the last complete day and Monday-to-Sunday week", () => {
  const wednesday = Date.UTC(2026, 10, 25, 13, 0);
  assert.deepEqual(lastPeriod("daily", wednesday), {
    id: "daily:2026-11-24",
    from: Date.UTC(2026, 10, 24),
    to: Date.UTC(2026, 10, 25),
    days: 1,
  });
  assert.deepEqual(lastPeriod("weekly", wednesday), {
    id: "weekly:2026-11-16",
    from: Date.UTC(2026, 10, 16),
    to: Date.UTC(2026, 10, 23),
    days: 7,
  });
});
