/** Waits until `condition` holds, checking every few milliseconds; fails after the deadline. */
export async function waitFor(
  condition: () => boolean | Promise<boolean>,
  options: { timeoutMs?: number; message?: string } = {},
): Promise<void> {
  const deadline = Date.now() + (options.timeoutMs ?? 10_000);
  while (!await condition()) {
    if (Date.now() > deadline) {
      throw new Error(`Timed out waiting: ${options.message ?? "condition"}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
