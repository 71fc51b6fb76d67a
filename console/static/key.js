/** Tenant key rotation: the new key is shown once; every old key stops working at once. */
import { apiOk, signIn } from "./api.js";
import { confirmDialog, copyButton, h } from "./dom.js";

/** The tenant key page. */
export function keyView() {
  const result = h("div", {});
  const rotate = h("button", {
    type: "button",
    class: "danger",
    onclick: async () => {
      const yes = await confirmDialog({
        title: "Rotate the tenant key?",
        message:
          "Every current key of your organization stops working at once: scripts and servers using it will get 401 until they get the new key. The new key is shown only once.",
        action: "Rotate key",
      });
      if (!yes) return;
      const { tenantKey } = await apiOk("POST", "/keys/rotate");
      signIn(tenantKey); // The console goes on with the new key.
      const shown = h("input", {
        type: "text",
        readonly: true,
        value: tenantKey,
        class: "secret",
        "aria-label": "New tenant key",
      });
      result.replaceChildren(
        h(
          "div",
          { class: "card alert", role: "alert" },
          h("h2", {}, "Your new tenant key"),
          h(
            "p",
            {},
            "Copy it now: it is shown only this once and cannot be retrieved. The old key no longer works.",
          ),
          shown,
          copyButton("Copy key", () => tenantKey),
        ),
      );
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
        "Rotating stops every current key at once, including the one in your scripts.",
      ),
      rotate,
    ),
    result,
  );
}
