/** A form's ready-to-paste snippets: a plain HTML form and a fetch version. */
import { apiOk, deployment } from "./api.js";
import { copyButton, h } from "./dom.js";
import { formHeader, loadForm, nowhereNotice } from "./forms.js";
import { timeTrapLines } from "./rules.js";

/** A value as an HTML attribute's text. */
function attr(value) {
  return value.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;");
}

/** The honeypot input: off screen for people, left to bots. */
function honeypotInput(field) {
  return field
    ? `\n  <!-- Leave empty: a spam trap (honeypot) people never see -->\n  <input type="text" name="${
      attr(field)
    }" tabindex="-1" autocomplete="off" aria-hidden="true"\n    style="position:absolute;left:-10000px">`
    : "";
}

const FIELDS = `  <label>Email <input type="email" name="email" required></label>
  <label>Message <textarea name="message" required></textarea></label>`;

/** Each provider's widget: its script and the element it fills (the token field goes in the form). */
const WIDGETS = {
  hcaptcha: { script: "https://js.hcaptcha.com/1/api.js", element: "h-captcha" },
  turnstile: {
    script: "https://challenges.cloudflare.com/turnstile/v0/api.js",
    element: "cf-turnstile",
  },
  recaptcha: { script: "https://www.google.com/recaptcha/api.js", element: "g-recaptcha" },
};

/**
 * The captcha widget of the deployment's provider, for a form that requires one. The
 * widget puts its token in a field of the form (h-captcha-response, cf-turnstile-response
 * or g-recaptcha-response), which formrelay reads: no script of your own is needed.
 */
export function captchaWidget(form, provider) {
  if (!form.verifyCaptcha) return "";
  const widget = WIDGETS[provider?.id];
  if (widget === undefined) {
    return `\n  <!-- This form requires a captcha: put your captcha widget here. Its token is read
       from a field named h-captcha-response, cf-turnstile-response or g-recaptcha-response. -->`;
  }
  return `\n  <!-- This form requires a captcha (${provider.name}): use your site key from ${provider.name}. -->
  <script src="${widget.script}" async defer></script>
  <div class="${widget.element}" data-sitekey="YOUR_SITE_KEY"></div>`;
}

/** The plain HTML version: the browser posts and lands on the redirect or thank-you page. */
export function plainSnippet(endpoint, form, provider) {
  return `<form action="${endpoint}" method="POST">
${FIELDS}${honeypotInput(form.honeypotField)}${captchaWidget(form, provider)}${
    timeTrapLines(endpoint, form)
  }
  <button type="submit">Send</button>
</form>`;
}

/** The fetch version: stays on the page and shows the answer. */
export function fetchSnippet(endpoint, form, provider) {
  return `<form id="contact-form">
${FIELDS}${honeypotInput(form.honeypotField)}${captchaWidget(form, provider)}${
    timeTrapLines(endpoint, form)
  }
  <button type="submit">Send</button>
  <p id="contact-status" role="status"></p>
</form>
<script>
  document.getElementById("contact-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const status = document.getElementById("contact-status");
    let response;
    try {
      response = await fetch("${endpoint}", {
        method: "POST",
        headers: { "Content-Type": "application/json", "Accept": "application/json" },
        body: JSON.stringify(Object.fromEntries(new FormData(event.target))),
      });
    } catch {
      // No readable answer: this site's origin was refused (CORS hides the answer), or the
      // service could not be reached. A no-cors request succeeds whenever it answers at all.
      const reachable = await fetch(new URL("/healthz", "${endpoint}"), { mode: "no-cors" })
        .then(() => true, () => false);
      status.textContent = reachable
        ? "Sorry, this website is not allowed to send to this form. Please contact us another way."
        : "Could not reach the form service: check your connection and try again.";
      return;
    }
    const answer = await response.json().catch(() => ({}));
    if (response.ok) {
      status.textContent = "Thank you! Your message was sent.";
      event.target.reset();
    } else if (response.status === 429 || response.status === 503) {
      status.textContent = "Too many messages right now: please try again in a few minutes.";
    } else if (answer.retryAfter !== undefined) {
      // A refusal that passes by itself: the captcha service could not be reached.
      status.textContent = "Your message could not be checked just now: " +
        "please try again in a few minutes.";
    } else {
      // A refusal: the form or the site needs fixing, trying again will not help.
      status.textContent = "Sorry, your message was not accepted (" +
        (answer.error ?? "HTTP " + response.status) + "). Please contact us another way.";
    }
  });
</script>`;
}

function snippetBlock({ title, id, text, note, copy }) {
  return h(
    "div",
    { class: "card" },
    h(
      "div",
      { class: "title-row" },
      h("h2", { id: `${id}-title` }, title),
      copyButton(copy, () => text),
    ),
    h("p", { class: "hint" }, note),
    h(
      "pre",
      { class: "snippet", id, tabindex: 0, "aria-labelledby": `${id}-title` },
      h("code", {}, text),
    ),
  );
}

/** The snippet page of a form. */
export async function snippetView(id) {
  const [form, { destinations }, { captcha }] = await Promise.all([
    loadForm(id),
    apiOk("GET", `/forms/${encodeURIComponent(id)}/destinations`),
    deployment(),
  ]);
  const endpoint = `${location.origin}/v1/f/${form.publicKey}`;
  return h(
    "section",
    {},
    formHeader(form, "snippet"),
    nowhereNotice(form, destinations),
    h(
      "div",
      { class: "card" },
      h("h2", {}, "Endpoint"),
      h(
        "p",
        {},
        h("code", { class: "endpoint" }, endpoint),
        " ",
        copyButton("Copy endpoint", () => endpoint),
      ),
      h(
        "p",
        { class: "hint" },
        "The public key in this address is safe to publish; it only lets people submit to this form.",
      ),
      form.allowedOrigins.length > 0
        ? h(
          "p",
          { class: "hint" },
          `Only pages on ${form.allowedOrigins.join(", ")} may post here.`,
        )
        : null,
    ),
    snippetBlock({
      title: "HTML form",
      id: "snippet-html",
      text: plainSnippet(endpoint, form, captcha),
      note:
        "Works without JavaScript: the browser posts and shows the thank-you page or your redirect URL.",
      copy: "Copy HTML form",
    }),
    snippetBlock({
      title: "Fetch version",
      id: "snippet-fetch",
      text: fetchSnippet(endpoint, form, captcha),
      note: "Stays on your page and shows the answer.",
      copy: "Copy fetch version",
    }),
  );
}
