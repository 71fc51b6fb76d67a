/**
 * Whether a request is a browser's plain HTML form post, from its Content-Type and
 * Accept headers ("" when absent): form-encoded or multipart, with an Accept header that
 * prefers text/html to JSON. fetch and XHR callers send `*\/*` or `application/json` and
 * keep getting JSON.
 */
export function isBrowserFormPost(contentType: string, accept: string): boolean {
  const type = contentType.toLowerCase();
  if (
    !type.startsWith("application/x-www-form-urlencoded") && !type.startsWith("multipart/form-data")
  ) {
    return false;
  }
  return quality(accept, "text/html") > quality(accept, "application/json");
}

/** The q-value the Accept header gives a media type (0 when absent). */
function quality(accept: string, mediaType: string): number {
  for (const part of accept.split(",")) {
    const [type, ...params] = part.trim().split(";");
    if (type.trim().toLowerCase() !== mediaType) continue;
    const q = params.map((p) => p.trim()).find((p) => p.startsWith("q="));
    return q ? Number(q.slice(2)) || 0 : 1;
  }
  return 0;
}

/** Text made safe inside HTML, attribute values included. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
}

/** A small self-contained page (its style inline): the service's own pages for people. */
export function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem;color:#222}h1{font-size:1.4rem}</style>
</head>
<body>
<main>
<h1>${escapeHtml(title)}</h1>
${body}
</main>
</body>
</html>
`;
}

/**
 * What the visitor can do about a refusal, by its status and reason, and whether it
 * passes by itself (`retryable`: the answer had a Retry-After). Some refusals are the
 * website's to fix (an origin not allowed, a form taken down): the visitor is told it is
 * not their input and to reach the site's owner another way, not to "check the form".
 */
export function visitorAdvice(status: number, reason: string, retryable = false): string {
  if (/captcha/i.test(reason)) {
    return retryable
      ? "The captcha check could not be done just now. Nothing you entered is wrong: " +
        "please go back and try again in a few minutes."
      : "Go back, complete the captcha (the “I am human” check) and send the form again.";
  }
  if (/file uploads/i.test(reason)) {
    return "This form cannot take files: go back, remove the attachment and send it again.";
  }
  switch (status) {
    case 403:
      return "This website is not set up to send messages through this form. Nothing you " +
        "entered is wrong: please tell the site's owner, or reach them another way.";
    case 404:
      return "This form no longer takes messages. Please reach the site's owner another way.";
    case 408:
      return "Your message took too long to arrive: go back and send it again.";
    case 413:
      return "Your message is too long: go back, shorten it and send it again.";
    case 415:
      return "This form is set up wrongly on the website. Nothing you entered is wrong: " +
        "please tell the site's owner, or reach them another way.";
    case 429:
      return "You have sent several messages in a short time: please wait a few minutes, " +
        "then go back and send it again.";
    case 503:
      return "The form service is busy right now: please go back and try again in a few minutes.";
    default:
      return status >= 500
        ? "Something went wrong on our side: please go back and try again in a few minutes."
        : "Go back, check what you entered and send it again.";
  }
}

/**
 * The page a person sees when a plain HTML form post is refused; `retryable` when the
 * answer carries a Retry-After (the refusal passes by itself).
 */
export function errorPage(status: number, reason: string, retryable = false): string {
  return page(
    "Your submission was not sent",
    `<p>${escapeHtml(visitorAdvice(status, reason, retryable))}</p>
<p>The reason given: ${escapeHtml(reason)} (error ${status}).</p>
<p><a href="javascript:history.back()">Back to the form</a></p>`,
  );
}

/** The page a person sees after a plain HTML form post when the form has no redirectUrl. */
export function thankYouPage(): string {
  return page("Thank you", "<p>Your submission was received.</p>");
}
