// formrelay example: posts the contact form with fetch (JSON) and wires the plain HTML form.
//
// For real use, hard-code your service and the form's public key here, e.g.
//   const ENDPOINT = "https://forms.example.com";
//   const PUBLIC_KEY = "pk_...";
// (the public key is not a secret: it only lets people submit to this one form). This demo
// reads both from its own query string instead, so it runs against any formrelay:
//   contact.html?endpoint=http://127.0.0.1:8000&key=pk_...
const params = new URLSearchParams(location.search);
const ENDPOINT = (params.get("endpoint") ?? "https://forms.example.com").replace(/\/+$/, "");
const PUBLIC_KEY = params.get("key") ?? "pk_REPLACE_ME";
const SUBMIT_URL = `${ENDPOINT}/v1/f/${encodeURIComponent(PUBLIC_KEY)}`;

if (!params.has("endpoint") || !params.has("key")) {
  const warning = document.getElementById("config-warning");
  warning.textContent = "Demo mode: add ?endpoint=<formrelay URL>&key=<public key> to the " +
    "address, or hard-code them in contact.js.";
  warning.hidden = false;
}

// The plain form is posted by the browser itself; formrelay answers 303 to the form's
// redirectUrl, or a short HTML page saying what was wrong.
document.getElementById("plain-form").action = SUBMIT_URL;

// The time trap: formrelay signs the time this page loaded, and both forms send it back in
// their hidden _formrelay_loaded field. A form whose spamRules.minSeconds is set drops a
// submission sent sooner than that after loading (bots send within a second), or one
// without a genuine token. A token is good for one submission within two hours, so the
// page asks for a new one after each message it sends. The field itself is never delivered.
function loadPageToken() {
  fetch(`${ENDPOINT}/v1/f/${encodeURIComponent(PUBLIC_KEY)}/page-token`)
    .then((response) => response.json())
    .then((answer) => {
      for (const input of document.querySelectorAll('input[name="_formrelay_loaded"]')) {
        input.value = answer.token;
      }
    })
    .catch(() => {}); // Offline or demo mode: the rest of the page still works.
}
loadPageToken();

const fetchForm = document.getElementById("fetch-form");
const status = document.getElementById("fetch-status");

function showStatus(state, text) {
  status.dataset.state = state;
  status.textContent = text;
}

fetchForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  if (!fetchForm.reportValidity()) return;
  const button = fetchForm.querySelector("button");
  button.disabled = true;
  showStatus("pending", "Sending…");
  try {
    // JSON is not a "simple" content type, so the browser first sends a CORS preflight
    // (OPTIONS); formrelay allows it for the origins in the form's allowedOrigins.
    const response = await fetch(SUBMIT_URL, {
      method: "POST",
      headers: { "Content-Type": "application/json", "Accept": "application/json" },
      body: JSON.stringify(Object.fromEntries(new FormData(fetchForm))),
    });
    const body = await response.json().catch(() => null);
    if (response.ok && body?.ok) {
      showStatus("success", `Thank you! Your message was sent (submission ${body.submissionId}).`);
      fetchForm.reset();
      loadPageToken();
    } else if (response.status === 429 || response.status === 503) {
      showStatus("error", "Sorry, too many messages right now: please try again in a few minutes.");
    } else if (body?.retryAfter !== undefined) {
      // A refusal that passes by itself: the captcha service could not be reached.
      showStatus(
        "error",
        "Sorry, your message could not be checked just now: please try again in a few minutes.",
      );
    } else {
      // A refusal, as JSON: { ok: false, error: "Captcha token is required" }.
      const reason = body?.error ?? `HTTP ${response.status}`;
      showStatus("error", `Sorry, your message was not accepted: ${reason}.`);
    }
  } catch {
    // No answer the page may read. Either the service refused this page's origin (CORS:
    // the browser hides that answer) or it could not be reached. A no-cors request tells
    // them apart: it succeeds whenever the service answers at all.
    const reachable = await fetch(`${ENDPOINT}/healthz`, { mode: "no-cors" })
      .then(() => true, () => false);
    showStatus(
      "error",
      reachable
        ? "Sorry, your message was not sent: this website is not allowed to send to this form " +
          "(its address is not in the form's allowed origins). Please reach us another way."
        : "Sorry, your message was not sent: the form service could not be reached. Check " +
          "your connection and try again.",
    );
  } finally {
    button.disabled = false;
  }
});
