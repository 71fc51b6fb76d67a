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
