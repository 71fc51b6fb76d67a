/**
 * The one place that makes destination URLs safe to show. Webhook and script web app
 * URLs carry their secrets in the path, the query and the userinfo, so any text that is
 * logged or stored names a destination by `scheme://host[:port]` only. Error texts of
 * `fetch` and of other libraries quote whole URLs: {@linkcode redactUrls} cuts them down.
 *
 * @module
 */

/** `scheme://host[:port]` of a URL: no userinfo, path, query or fragment. */
export function urlOrigin(url: URL | string): string {
  try {
    const parsed = typeof url === "string" ? new URL(url) : url;
    return `${parsed.protocol}//${parsed.host}`;
  } catch {
    return "(invalid URL)";
  }
}

/** `scheme://` and the rest of the word: the URL is cut at white space or a quote. */
const URL_IN_TEXT = /\b([a-z][a-z0-9+.-]*:\/\/)[^\s"'<>`]*/gi;
/** Punctuation that more likely closes the sentence than belongs to the URL. */
const TRAILING = /[)\],.;:!?]+$/;

/**
 * The text with every URL in it reduced to `scheme://host[:port]`; a URL that does not
 * parse keeps only its scheme. Cheap when the text holds no `://`.
 */
export function redactUrls(text: string): string {
  if (!text.includes("://")) return text;
  return text.replace(URL_IN_TEXT, (match, scheme: string) => {
    const trailing = TRAILING.exec(match)?.[0] ?? "";
    const url = match.slice(0, match.length - trailing.length);
    let shown: string;
    try {
      const parsed = new URL(url);
      // Non-special schemes have no host to show; their rest may be anything.
      shown = parsed.host === "" ? `${scheme}…` : `${parsed.protocol}//${parsed.host}`;
    } catch {
      shown = `${scheme}…`;
    }
    return shown + trailing;
  });
}
