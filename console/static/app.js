/**
 * The tenant console: a hash router over views that call the admin API (api.js).
 * Routes: #/forms, #/forms/new, #/forms/<id>/(settings|snippet|destinations|deliveries), #/key,
 * #/notifications.
 */
import { api, SignedOut, signedOutNotice, signIn, signOut, tenantKey } from "./api.js";
import { deliveriesView } from "./deliveries.js";
import { destinationsView } from "./destinations.js";
import { clearErrors, field, formError, h, showErrors } from "./dom.js";
import { formSettingsView, formsView } from "./forms.js";
import { keyView } from "./key.js";
import { notificationsView } from "./notifications.js";
import { snippetView } from "./snippet.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const problem = document.getElementById("problem");

/** Replaces the page's content and moves focus to it, as a page load would. */
function show(title, ...content) {
  document.title = `${title} · formrelay console`;
  problem.textContent = "";
  main.replaceChildren(...content);
  main.focus();
}

function signInView(message) {
  nav.hidden = true;
  const input = h("input", {
    type: "password",
    autocomplete: "off",
    spellcheck: "false",
    required: true,
  });
  const form = h(
    "form",
    {
      class: "card narrow",
      onsubmit: async (event) => {
        event.preventDefault();
        clearErrors(form);
        const key = input.value.trim();
        try {
          const { status, body } = await api("GET", "/forms", undefined, key);
          if (status !== 200) return showErrors(form, body);
          signIn(key);
          location.hash = "#/forms";
          route();
        } catch (error) {
          if (!(error instanceof SignedOut)) throw error;
          if (error.disabled) return signInView(signedOutNotice(error));
          showErrors(form, {
            error: "Sign-in failed",
            issues: [{ path: "key", message: error.message }],
          });
        }
      },
    },
    h("h1", {}, "Sign in"),
    message ? h("p", { class: "notice", role: "status" }, message) : null,
    field({
      label: "Tenant key",
      path: "key",
      hint:
        "The sk_… key from create-org or a rotation. It is kept in this tab only and forgotten when you sign out or close the tab.",
      input,
    }),
    formError(),
    h("button", { type: "submit", class: "primary" }, "Sign in"),
  );
  show("Sign in", form);
}

/** Shows the view of the current hash. */
export async function route() {
  if (tenantKey() === null) return signInView();
  nav.hidden = false;
  const [, section, id, tab] = location.hash.split("/");
  try {
    if (section === "key") return show("Tenant key", keyView());
    if (section === "notifications") return show("Notifications", await notificationsView());
    if (section === "forms" && id === "new") return show("New form", await formSettingsView(null));
    if (section === "forms" && id) {
      const views = {
        settings: ["Settings", formSettingsView],
        snippet: ["Snippet", snippetView],
        destinations: ["Destinations", destinationsView],
        deliveries: ["Deliveries", deliveriesView],
      };
      const [title, view] = views[tab] ?? views.settings;
      return show(title, await view(decodeURIComponent(id)));
    }
    show("Forms", await formsView());
  } catch (error) {
    if (error instanceof SignedOut) {
      signOut();
      return signInView(signedOutNotice(error));
    }
    show(
      "Error",
      h("p", { class: "form-error", role: "alert" }, `Something went wrong: ${error.message}`),
    );
  }
}

document.getElementById("sign-out").addEventListener("click", () => {
  signOut();
  location.hash = "";
  signInView("You are signed out.");
});
addEventListener("hashchange", route);
// A failed action (the API refused, the network is gone) is said at the top of the page.
document.addEventListener("console-problem", ({ detail: error }) => {
  if (error instanceof SignedOut) {
    signOut();
    signInView(signedOutNotice(error));
  } else {
    problem.textContent = `That did not work: ${error?.message ?? error}`;
  }
});
route();
