import { type Browser, chromium } from "../deps.ts";

/** Debian's Chromium (`apt-get install -y chromium`); never a downloaded one. */
const CHROMIUM = "/usr/bin/chromium";

/** Launches headless Chromium with the flags that work here (NOTES.md "Load and browsers"). */
export function launchChromium(timeoutMs: number): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
    ],
    timeout: timeoutMs,
  });
}

/**
 * Chromium with a console page signed in with a tenant key (1280×900 unless `viewport`
 * says); page errors are gathered in `problems` (a test asserts it stays empty).
 * `await using` closes it.
 */
export async function openConsole(
  { origin, tenantKey, timeoutMs, viewport = { width: 1280, height: 900 } }: {
    origin: string;
    tenantKey: string;
    timeoutMs: number;
    viewport?: { width: number; height: number };
  },
) {
  const browser = await launchChromium(timeoutMs);
  const problems: string[] = [];
  try {
    const context = await browser.newContext({ viewport });
    context.setDefaultTimeout(timeoutMs);
    const page = await context.newPage();
    page.on("pageerror", (error) => problems.push(`pageerror: ${error.message}`));
    await page.goto(`${origin}/`);
    await page.getByLabel("Tenant key").fill(tenantKey);
    await page.getByRole("button", { name: "Sign in" }).click();
    return { page, problems, [Symbol.asyncDispose]: () => browser.close() };
  } catch (error) {
    await browser.close();
    throw error;
  }
}
