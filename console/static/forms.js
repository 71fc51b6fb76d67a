/** Forms: the list, the settings of one (create and edit) and its deletion. */
import { api, apiOk, deployment, TYPE_NAMES } from "./api.js";
import { clearErrors, confirmDialog, field, formError, h, showErrors, when } from "./dom.js";
import { confirmationFields, spamRuleFields } from "./rules.js";

/**
 * The flag of a form whose submissions go nowhere (no enabled destination), or null.
 * Such submissions are accepted (the visitor did nothing wrong) and counted as "nowhere".
 */
export function nowhereNotice(form, destinations) {
  if (destinations.some((d) => d.isEnabled)) return null;
  return h(
    "p",
    { class: "card notice-next", role: "note" },
    destinations.length === 0
      ? "Submissions to this form go nowhere yet: "
      : "Every destination of this form is disabled: submissions are accepted and sent nowhere. ",
    h("a", { href: `#/forms/${form.id}/destinations` }, "add or enable a destination"),
    ".",
  );
}

/** A flagged destination in words: "Sales inbox (Slack) is paused", "Webhook is failing". */
function alertTitle(alert) {
  const type = TYPE_NAMES[alert.type] ?? alert.type;
  const what = alert.name ? `${alert.name} (${type})` : type;
  return `${what} is ${alert.state === "paused" ? "paused" : "failing"}`;
}

/** One line per flagged destination of a form: what, and why in the service's words. */
function alertLines(form) {
  return form.destinationAlerts.map((alert) =>
    h(
      "p",
      { class: "health", "data-alert": alert.state },
      h("strong", {}, `${alertTitle(alert)}: `),
      alert.reason.endsWith(".") ? alert.reason : `${alert.reason}.`,
      alert.state === "paused"
        ? " New submissions are held until you resume it."
        : " Its submissions are retried.",
    )
  );
}

/**
 * The first thing an owner sees when a destination needs them: each form whose
 * destination is paused or failing, with a way to its deliveries (the reasons are in
 * the form's row below).
 */
function attentionCard(forms) {
  const flagged = forms.filter((form) => form.destinationAlerts.length > 0);
  if (flagged.length === 0) return null;
  return h(
    "div",
    { class: "card alert", role: "region", "aria-label": "Forms needing attention" },
    h("h2", {}, "Needs attention"),
    h(
      "ul",
      {},
      flagged.map((form) =>
        h(
          "li",
          {},
          h("a", { href: `#/forms/${form.id}/deliveries` }, form.name),
          `: ${form.destinationAlerts.map(alertTitle).join("; ")}.`,
        )
      ),
    ),
  );
}

/** The list of forms. */
export async function formsView() {
  // The type names of flagged destinations come with the deployment.
  const [{ forms }] = await Promise.all([apiOk("GET", "/forms"), deployment()]);
  // Which forms send nowhere: flagged in the list, as the first thing to fix.
  const sendsNowhere = new Set();
  await Promise.all(forms.map(async (form) => {
    const { destinations } = await apiOk("GET", `/forms/${form.id}/destinations`);
    if (!destinations.some((d) => d.isEnabled)) sendsNowhere.add(form.id);
  }));
  const list = forms.length === 0
    ? h("p", { class: "empty" }, "No forms yet. Create one, then add where its submissions go.")
    : h(
      "ul",
      { class: "list" },
      forms.map((form) =>
        h(
          "li",
          { class: "card row" },
          h(
            "div",
            {},
            h("h2", {}, h("a", { href: `#/forms/${form.id}/settings` }, form.name)),
            h(
              "p",
              { class: "meta" },
              h("code", {}, form.publicKey),
              ` · created ${when(form.createdAt)}`,
            ),
            alertLines(form),
          ),
          h(
            "div",
            {},
            sendsNowhere.has(form.id)
              ? h("span", { class: "badge paused" }, "No destination")
              : null,
            form.destinationAlerts.map((alert) =>
              h(
                "span",
                { class: `badge ${alert.state === "paused" ? "paused" : "retrying"}` },
                alert.state === "paused" ? "Destination paused" : "Destination failing",
              )
            ),
            h(
              "span",
              { class: form.enabled ? "badge ok" : "badge off" },
              form.enabled ? "Enabled" : "Disabled",
            ),
          ),
        )
      ),
    );
  return h(
    "section",
    {},
    h(
      "div",
      { class: "title-row" },
      h("h1", {}, "Forms"),
      h("a", { class: "button primary", href: "#/forms/new" }, "New form"),
    ),
    attentionCard(forms),
    list,
  );
}

/** The heading and tabs of one form's pages. */
export function formHeader(form, active) {
  const tabs = [
    ["settings", "Settings"],
    ["snippet", "Snippet"],
    ["destinations", "Destinations"],
    ["deliveries", "Deliveries"],
  ];
  return h(
    "div",
    { class: "form-header" },
    h("p", { class: "crumbs" }, h("a", { href: "#/forms" }, "Forms"), " / "),
    h("h1", {}, form.name, form.enabled ? null : h("span", { class: "badge off" }, "Disabled")),
    h(
      "nav",
      { class: "tabs", "aria-label": "Form" },
      tabs.map(([tab, label]) =>
        h("a", {
          href: `#/forms/${form.id}/${tab}`,
          "aria-current": tab === active ? "page" : null,
        }, label)
      ),
    ),
  );
}

/** Reads one form, as every page of a form needs. */
export async function loadForm(id) {
  return (await apiOk("GET", `/forms/${encodeURIComponent(id)}`)).form;
}

/** Settings of a form; `id` null creates one. */
export async function formSettingsView(id) {
  const [form, { captcha, platformRelay }, destinations, days] = await Promise.all([
    id === null ? null : loadForm(id),
    deployment(),
    id === null
      ? []
      : apiOk("GET", `/forms/${encodeURIComponent(id)}/destinations`).then((a) => a.destinations),
    id === null
      ? []
      : apiOk("GET", `/forms/${encodeURIComponent(id)}/refusals?days=7`).then((a) => a.days),
  ]);
  const spam = spamRuleFields(form, days);
  const confirmation = confirmationFields(form, { destinations, platformRelay });
  const input = (props) => h("input", props);
  const name = input({ type: "text", value: form?.name ?? "", required: true, maxlength: 200 });
  const origins = h("textarea", { rows: 3 });
  origins.value = (form?.allowedOrigins ?? []).join("\n");
  const verifyCaptcha = input({ type: "checkbox", checked: form?.verifyCaptcha });
  const captchaSecret = input({ type: "password", autocomplete: "off" });
  const honeypot = input({
    type: "text",
    value: form === null ? "_gotcha" : form.honeypotField ?? "",
  });
  const redirectUrl = input({ type: "url", value: form?.redirectUrl ?? "" });
  const enabled = input({ type: "checkbox", checked: form?.enabled ?? true });
  const saved = h("p", { class: "notice", role: "status" });

  const editor = h(
    "form",
    {
      class: "card",
      novalidate: true,
      onsubmit: async (event) => {
        event.preventDefault();
        clearErrors(editor);
        saved.textContent = "";
        const body = {
          name: name.value,
          allowedOrigins: origins.value.split(/[\s,]+/).filter(Boolean),
          verifyCaptcha: verifyCaptcha.checked,
          honeypotField: honeypot.value.trim() || null,
          redirectUrl: redirectUrl.value.trim() || null,
          enabled: enabled.checked,
          spamRules: spam.read(),
          confirmation: confirmation.read(),
        };
        if (captchaSecret.value) body.captchaSecret = captchaSecret.value;
        const { status, body: answer } = form === null
          ? await api("POST", "/forms", body)
          : await api("PATCH", `/forms/${form.id}`, body);
        if (status !== 200) return showErrors(editor, answer);
        if (form === null) {
          location.hash = `#/forms/${answer.form.id}/snippet`;
        } else {
          Object.assign(form, answer.form);
          captchaSecret.value = "";
          saved.textContent = "Saved.";
        }
      },
    },
    field({ label: "Name", path: "name", input: name }),
    field({
      label: "Allowed origins",
      path: "allowedOrigins",
      hint: "One per line, e.g. https://www.example.com. Empty: any site may post.",
      input: origins,
    }),
    field({
      label: "Honeypot field",
      path: "honeypotField",
      hint: "A hidden field bots fill in; submissions with it are dropped quietly. Empty: none.",
      input: honeypot,
    }),
    field({
      label: "Redirect URL",
      path: "redirectUrl",
      hint: "Where plain HTML form posts land after sending. Empty: a small thank-you page.",
      input: redirectUrl,
    }),
    field({
      label: `Require a captcha (${captcha.name})`,
      path: "verifyCaptcha",
      hint: `This service checks captcha tokens with ${captcha.name} (${captcha.verifyHost}): ` +
        "use a site key and secret from there. The snippet page shows the widget to add.",
      input: verifyCaptcha,
    }),
    field({
      label: "Captcha secret",
      path: "captchaSecret",
      hint: form?.hasCaptchaSecret
        ? "A secret is stored (never shown). Leave empty to keep it."
        : `The secret key of your site at ${captcha.name}.`,
      input: captchaSecret,
    }),
    field({ label: "Enabled (accepts submissions)", path: "enabled", input: enabled }),
    spam.fields,
    confirmation.fields,
    formError(),
    h(
      "div",
      { class: "actions" },
      h("button", { type: "submit", class: "primary" }, form ? "Save" : "Create form"),
      saved,
    ),
  );
  if (form === null) return h("section", {}, h("h1", {}, "New form"), editor);

  const remove = h("button", {
    type: "button",
    class: "danger",
    onclick: async () => {
      const yes = await confirmDialog({
        title: "Delete this form?",
        message:
          `"${form.name}" and all its destinations will be deleted. Its endpoint stops accepting submissions. This cannot be undone.`,
        action: "Delete form",
      });
      if (!yes) return;
      await apiOk("DELETE", `/forms/${form.id}`);
      location.hash = "#/forms";
    },
  }, "Delete form");
  return h(
    "section",
    {},
    formHeader(form, "settings"),
    editor,
    h(
      "div",
      { class: "card danger-zone" },
      h("h2", {}, "Delete"),
      h("p", {}, "Deletes the form and its destinations."),
      remove,
    ),
  );
}
