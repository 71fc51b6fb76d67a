/**
 * Rotating a secret or key with an overlap: how long the old one keeps working (chosen
 * from a short list), and the new one shown once with when the old one stops.
 */
import { apiOk } from "./api.js";
import { confirmDialog, copyButton, h, when } from "./dom.js";

/** The overlaps offered, in hours (the API takes up to 168). */
const OVERLAPS = [
  [0, "at once"],
  [1, "after 1 hour"],
  [24, "after 24 hours"],
  [168, "after 7 days"],
];

/** A select of how long the old value keeps working, in hours, starting at `initial` (label it). */
export function overlapSelect(initial) {
  const select = h(
    "select",
    {},
    OVERLAPS.map(([hours, text]) => h("option", { value: String(hours) }, text)),
  );
  select.value = String(initial);
  return select;
}

/** A new secret or key shown once, with a copy button and when the old one stops. */
export function shownOnce({ title, value, label, copy, stops }) {
  return h(
    "div",
    { class: "card alert", role: "alert" },
    h("h2", {}, title),
    h("p", {}, "Copy it now: it is shown only this once and cannot be retrieved. ", stops),
    h("input", { type: "text", readonly: true, value, class: "secret", "aria-label": label }),
    copyButton(copy, () => value),
  );
}

/** The sentence saying until when the replaced signing secret still signs. */
function signingStops(previousValidUntil) {
  return previousValidUntil === null
    ? "The old secret no longer signs."
    : `Deliveries carry both signatures until ${
      when(previousValidUntil)
    }; after that only the new secret signs: update your receiver before then.`;
}

/**
 * "Rotate signing secret" with its overlap choice: POSTs to `path` (a rotate-secret
 * route), then shows the new secret once in `result` and calls `onRotated`.
 */
export function rotateSecretControl({ path, result, onRotated }) {
  const grace = overlapSelect(24);
  const button = h("button", {
    type: "button",
    onclick: async () => {
      const graceHours = Number(grace.value);
      const yes = await confirmDialog({
        title: "Rotate the signing secret?",
        message: graceHours === 0
          ? "The old secret stops signing at once: a receiver still checking it rejects deliveries until it has the new one."
          : "Deliveries carry a signature with the old and with the new secret until the old one stops, so the receiver can change over meanwhile.",
        action: "Rotate secret",
      });
      if (!yes) return;
      const { secret, previousValidUntil } = await apiOk("POST", path, { graceHours });
      result.replaceChildren(shownOnce({
        title: "Your new signing secret",
        value: secret,
        label: "New signing secret",
        copy: "Copy secret",
        stops: signingStops(previousValidUntil),
      }));
      onRotated?.();
    },
  }, "Rotate signing secret");
  return h(
    "span",
    { class: "rotate" },
    button,
    h("label", {}, " old secret stops signing ", grace),
  );
}

/** What a card says while a replaced secret still signs; null when none does. */
export function overlapNote(previousSecretValidUntil) {
  return previousSecretValidUntil
    ? `The previous signing secret signs too until ${when(previousSecretValidUntil)}.`
    : null;
}
