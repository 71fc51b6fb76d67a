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

/** What replaces a secret in an admin answer (connectors/types.ts REDACTED is the same). */
const HIDDEN = "********";

/**
 * A destination URL as admin answers show it (all but the one that stored it): scheme,
 * host and path kept, the userinfo's name and password, every query value and the
 * fragment replaced by `********` (`?token=…`, `https://user:pass@…`). A URL that does
 * not parse is hidden whole.
 */
export function redactUrlSecrets(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return HIDDEN;
  }
  const userinfo = parsed.username === "" && parsed.password === ""
    ? ""
    : `${HIDDEN}${parsed.password === "" ? "" : `:${HIDDEN}`}@`;
  const query = parsed.search === "" ? "" : "?" + [...parsed.searchParams.keys()]
    .map((name) => `${encodeURIComponent(name)}=${HIDDEN}`).join("&");
  const fragment = parsed.hash === "" ? "" : `#${HIDDEN}`;
  return `${parsed.protocol}//${userinfo}${parsed.host}${parsed.pathname}${query}${fragment}`;
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
