/**
 * Building the page: every string goes in as text (never as HTML), so names, URLs and
 * error texts a tenant typed can never become markup or script.
 */

/** Creates an element; `on…` props become listeners, other props attributes. */
export function h(tag, props = {}, ...children) {
  return fill(document.createElement(tag), props, children);
}

/** Creates an SVG element, as h() does. */
export function svg(tag, props = {}, ...children) {
  return fill(document.createElementNS("http://www.w3.org/2000/svg", tag), props, children);
}

/**
 * A listener whose failure (the API refused, the network is gone) is reported on the
 * page instead of lost: a "console-problem" event that app.js shows.
 */
function guarded(listener) {
  return (event) => {
    try {
      const result = listener(event);
      if (result instanceof Promise) result.catch(reportProblem);
    } catch (error) {
      reportProblem(error);
    }
  };
}

function reportProblem(error) {
  document.dispatchEvent(new CustomEvent("console-problem", { detail: error }));
}

function fill(element, props, children) {
  for (const [name, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), guarded(value));
    else if (name === "value" && "value" in element) element.value = value;
    else if (name === "checked") element.checked = true;
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

let fieldCount = 0;

/**
 * A labelled input with a place for its error. `path` names the API field it
 * concerns (e.g. "config.url"), so showErrors() can put an API issue beside it.
 */
export function field({ label, path, hint, input }) {
  const id = `f${++fieldCount}`;
  const error = h("p", { class: "field-error", id: `${id}-error`, "data-error-for": path });
  const hintEl = hint ? h("p", { class: "hint", id: `${id}-hint` }, hint) : null;
  input.id = id;
  input.dataset.path = path;
  input.setAttribute("aria-describedby", [hintEl && hintEl.id, error.id].filter(Boolean).join(" "));
  const isCheck = input.type === "checkbox";
  return h(
    "div",
    { class: isCheck ? "field check" : "field" },
    isCheck ? [input, h("label", { for: id }, label)] : [h("label", { for: id }, label), input],
    hintEl,
    error,
  );
}

/**
 * Shows a `400 Validation error` beside the fields: an issue at "config.to.0" goes to
 * the field of "config.to"; the rest (and any other error) into the form's message box.
 */
export function showErrors(form, answer) {
  clearErrors(form);
  const rest = [];
  for (const issue of answer.issues ?? []) {
    const target = errorSlot(form, issue.path);
    if (target) {
      // "config.to.1" at the field "config.to": say which line.
      const rest = String(issue.path).slice(target.dataset.errorFor.length + 1);
      const message = /^\d+$/.test(rest)
        ? `Line ${Number(rest) + 1}: ${issue.message}`
        : issue.message;
      target.textContent = target.textContent ? `${target.textContent}; ${message}` : message;
      form.querySelector(`[aria-describedby~="${target.id}"]`)?.setAttribute(
        "aria-invalid",
        "true",
      );
    } else {
      rest.push(issue.path ? `${issue.path}: ${issue.message}` : issue.message);
    }
  }
  const box = form.querySelector(".form-error");
  if (!answer.issues || rest.length > 0) {
    box.textContent = [answer.error, ...rest].join(" — ");
  }
  form.querySelector("[aria-invalid=true]")?.focus();
}

function errorSlot(form, path) {
  const parts = String(path).split(".");
  while (parts.length > 0) {
    const slot = [...form.querySelectorAll("[data-error-for]")]
      .find((el) => el.dataset.errorFor === parts.join("."));
    if (slot) return slot;
    parts.pop();
  }
  return null;
}

/** Clears the errors shown by showErrors(). */
export function clearErrors(form) {
  for (const slot of form.querySelectorAll(".field-error, .form-error")) slot.textContent = "";
  for (const input of form.querySelectorAll("[aria-invalid]")) {
    input.removeAttribute("aria-invalid");
  }
}

/** A box for a form's general error, announced when it changes. */
export function formError() {
  return h("p", { class: "form-error", role: "alert" });
}

/** Asks before something that cannot be undone; resolves true when confirmed. */
export function confirmDialog({ title, message, action }) {
  return new Promise((resolve) => {
    const dialog = h(
      "dialog",
      { class: "confirm", "aria-labelledby": "confirm-title" },
      h("h2", { id: "confirm-title" }, title),
      h("p", {}, message),
      h(
        "div",
        { class: "actions" },
        h("button", { type: "button", onclick: () => dialog.close("cancel") }, "Cancel"),
        h("button", { type: "button", class: "danger", onclick: () => dialog.close("ok") }, action),
      ),
    );
    dialog.addEventListener("close", () => {
      dialog.remove();
      resolve(dialog.returnValue === "ok");
    });
    document.body.append(dialog);
    dialog.showModal();
  });
}

/** Copies text; true when done. */
export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    return false;
  }
}

/** A copy button for the text `get()` returns, saying whether it worked. */
export function copyButton(label, get) {
  const status = h("span", { class: "copy-status", role: "status" });
  const button = h("button", {
    type: "button",
    onclick: async () => {
      status.textContent = await copyText(get()) ? "Copied" : "Select the text and copy it";
    },
  }, label);
  return h("span", { class: "copy" }, button, status);
}

/** A date as the reader's local time, or "—". */
export function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "—";
}
