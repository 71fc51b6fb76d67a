/** Waits until `condition` holds, checking every few milliseconds; fails after the deadline. */
export async function waitFor(
  condition: () => boolean | Promise<boolean>,
  options: { timeoutMs?: number; message?: string | (() => string) } = {},
): Promise<void> {
  const deadline = Date.now() + (options.timeoutMs ?? 10_000);
  while (!await condition()) {
    if (Date.now() > deadline) {
      const message = typeof options.message === "function" ? options.message() : options.message;
      throw new Error(`Timed out waiting: ${message ?? "condition"}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
