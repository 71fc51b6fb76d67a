/**
 * Tenant key rotation: the new key is shown once; the old keys stop at once, or keep
 * working for a chosen time so scripts and servers can change over without an outage.
 */
import { apiOk, signIn } from "./api.js";
import { confirmDialog, h, when } from "./dom.js";
import { overlapSelect, shownOnce } from "./rotation.js";

/** The tenant key page. */
export function keyView() {
  const result = h("div", {});
  const overlap = overlapSelect(0);
  const rotate = h("button", {
    type: "button",
    class: "danger",
    onclick: async () => {
      const expiresInHours = Number(overlap.value);
      const yes = await confirmDialog({
        title: "Rotate the tenant key?",
        message: expiresInHours === 0
          ? "Every current key of your organization stops working at once: scripts and servers using it will get 401 until they get the new key. The new key is shown only once."
          : "Every current key of your organization keeps working until the time chosen, then stops: give the new key to your scripts and servers before then. The new key is shown only once.",
        action: "Rotate key",
      });
      if (!yes) return;
      // Without an overlap the spec's call, with no body.
      const answer = expiresInHours === 0
        ? await apiOk("POST", "/keys/rotate")
        : await apiOk("POST", "/keys/rotate", { expiresInHours });
      const { tenantKey, previousKeysValidUntil } = answer;
      signIn(tenantKey); // The console goes on with the new key.
      result.replaceChildren(shownOnce({
        title: "Your new tenant key",
        value: tenantKey,
        label: "New tenant key",
        copy: "Copy key",
        stops: previousKeysValidUntil
          ? `The old key keeps working until ${when(previousKeysValidUntil)}, then stops.`
          : "The old key no longer works.",
      }));
    },
  }, "Rotate key");
  return h(
    "section",
    {},
    h("h1", {}, "Tenant key"),
    h(
      "div",
      { class: "card" },
      h(
        "p",
        {},
        "The tenant key (sk_…) signs in here and authenticates the admin API. Rotate it when it may have leaked or when someone who knew it leaves.",
      ),
      h(
        "p",
        { class: "warning" },
        "Rotating at once stops every current key, including the one in your scripts. If the key may have leaked, rotate at once.",
      ),
      h("p", { class: "rotate" }, h("label", {}, "Old keys stop ", overlap)),
      rotate,
    ),
    result,
  );
}
