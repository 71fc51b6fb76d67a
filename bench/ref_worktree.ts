/**
 * An earlier commit checked out beside this tree, for the benchmarks that measure the two
 * against each other (bench:compare, bench:side-by-side).
 */

const HERE = new URL("..", import.meta.url).pathname;

/** Runs git in this tree; its output, trimmed. */
async function git(args: string[]): Promise<string> {
  const output = await new Deno.Command("git", {
    args,
    cwd: HERE,
    stdout: "piped",
    stderr: "piped",
  })
    .output();
  if (!output.success) {
    throw new Error(`git ${args.join(" ")}: ${new TextDecoder().decode(output.stderr)}`);
  }
  return new TextDecoder().decode(output.stdout).trim();
}

/** One side of a comparison: its name as printed and the tree it runs from. */
export interface Side {
  name: string;
  dir: string;
}

/**
 * Checks `ref` out in a temporary git worktree; unless `ownBench`, this tree's bench/ is
 * copied over the worktree's, so that both sides are measured the same way. Returns the
 * two sides, REF first, and how to remove the worktree.
 */
export async function checkOutBeside(
  ref: string,
  options: { prefix: string; ownBench?: boolean },
): Promise<{ sides: [Side, Side]; remove(): Promise<void> }> {
  const refCommit = await git(["rev-parse", "--short", `${ref}^{commit}`]);
  const hereCommit = await git(["rev-parse", "--short", "HEAD"]);
  const dirty = (await git(["status", "--porcelain", "--untracked-files=no"])) !== "";
  const refDir = await Deno.makeTempDir({ prefix: options.prefix });
  await git(["worktree", "add", "--detach", refDir, refCommit]);
  if (!options.ownBench) {
    for await (const entry of Deno.readDir(`${HERE}bench`)) {
      if (entry.isFile) {
        await Deno.copyFile(`${HERE}bench/${entry.name}`, `${refDir}/bench/${entry.name}`);
      }
    }
  }
  return {
    sides: [
      { name: `${refCommit} (REF)`, dir: refDir },
      { name: `${hereCommit}${dirty ? "+changes" : ""} (this tree)`, dir: HERE },
    ],
    remove: () => git(["worktree", "remove", "--force", refDir]).then(() => {}),
  };
}

/** The median of `values`. */
export function median(values: number[]): number {
  const sorted = values.toSorted((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}
