/**
 * Docs that stay true: every environment variable config.ts reads is documented in
 * docs/configuration.md with its default, and nothing else is; every relative link between
 * the README and the pages under docs/ (and bench/README.md) resolves, to a file and, with
 * `#`, to a heading as GitHub renders its anchor.
 */
import assert from "node:assert/strict";
import { environmentVariables } from "../config.ts";

const ROOT = new URL("../", import.meta.url);

/** The product's Markdown pages, relative to the repository root. */
async function markdownPages(): Promise<string[]> {
  const pages = ["README.md", "bench/README.md"];
  for await (const entry of Deno.readDir(new URL("docs/", ROOT))) {
    if (entry.isFile && entry.name.endsWith(".md")) pages.push(`docs/${entry.name}`);
    if (!entry.isDirectory) continue;
    for await (const inner of Deno.readDir(new URL(`docs/${entry.name}/`, ROOT))) {
      if (inner.isFile && inner.name.endsWith(".md")) {
        pages.push(`docs/${entry.name}/${inner.name}`);
      }
    }
  }
  return pages.sort();
}

function read(path: string): string {
  return Deno.readTextFileSync(new URL(path, ROOT));
}

/** The page without fenced code blocks, where `#` lines and `](…)` are not Markdown. */
function withoutCode(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, "");
}

/** The anchors GitHub gives a page's headings: lowercased, punctuation dropped, spaces to "-". */
export function headingAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const [, text] of withoutCode(markdown).matchAll(/^#{1,6}[ \t]+(.+?)[ \t#]*$/gm)) {
    const plain = text.replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1"); // a link's text only
    const slug = plain.toLowerCase().replace(/[^\p{L}\p{N}\p{M}\p{Pc}\- ]/gu, "").replaceAll(
      " ",
      "-",
    );
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    anchors.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return anchors;
}

/** `### \`NAME\`` headings of docs/configuration.md, each with the text up to the next heading. */
function documentedVariables(): Map<string, string> {
  const sections = new Map<string, string>();
  const parts = withoutCode(read("docs/configuration.md")).split(/^(?=#{1,6} )/m);
  for (const part of parts) {
    const name = part.match(/^### `([A-Z][A-Z0-9_]*)`\s*$/m)?.[1];
    if (name !== undefined) sections.set(name, part);
  }
  return sections;
}

Deno.test("docs/configuration.md documents every variable of config.ts and nothing else", () => {
  const read = environmentVariables().map((v) => v.name).sort();
  const documented = [...documentedVariables().keys()].sort();
  assert.deepEqual(
    documented.filter((name) => !read.includes(name)),
    [],
    "documented but not read by config.ts",
  );
  assert.deepEqual(
    read.filter((name) => !documented.includes(name)),
    [],
    "read by config.ts but not documented",
  );
});

Deno.test("docs/configuration.md gives each variable's default as config.ts has it", () => {
  const sections = documentedVariables();
  for (const { name, defaultValue } of environmentVariables()) {
    if (defaultValue === undefined || defaultValue === "") continue; // no default: "unset"
    const section = sections.get(name) ?? "";
    assert.ok(
      section.includes(`Default \`${String(defaultValue)}\``),
      `${name}: expected "Default \`${String(defaultValue)}\`" in its section`,
    );
  }
});

Deno.test("every relative link between the README and docs/ resolves, anchors included", async () => {
  const pages = await markdownPages();
  const broken: string[] = [];
  let checked = 0;
  for (const page of pages) {
    const markdown = withoutCode(read(page)).replace(/`[^`\n]*`/g, "``");
    for (const [, target] of markdown.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto: …
      checked++;
      const [path, anchor] = target.split("#", 2);
      const file = path === "" ? new URL(page, ROOT) : new URL(path, new URL(page, ROOT));
      let stat: Deno.FileInfo;
      try {
        stat = Deno.statSync(file);
      } catch {
        broken.push(`${page}: ${target} (no such file)`);
        continue;
      }
      if (anchor === undefined) continue;
      const anchors = stat.isFile && file.pathname.endsWith(".md")
        ? headingAnchors(Deno.readTextFileSync(file))
        : new Set<string>();
      if (!anchors.has(anchor)) broken.push(`${page}: ${target} (no such heading)`);
    }
  }
  assert.deepEqual(broken, []);
  assert.ok(checked > 50, `expected the pages to link to each other, found ${checked} links`);
});

Deno.test("headingAnchors follows GitHub's rules", () => {
  const anchors = headingAnchors(
    "# Ingestion: `POST /v1/f/:publicKey`\n## The envelope's lifetime\n## Notes\n## Notes\n" +
      "```sh\n# not a heading\n```\n### Several processes rather than `deno serve --parallel`\n",
  );
  assert.deepEqual([...anchors].sort(), [
    "ingestion-post-v1fpublickey",
    "notes",
    "notes-1",
    "several-processes-rather-than-deno-serve---parallel",
    "the-envelopes-lifetime",
  ]);
});

Deno.test("the README stays a front door: at most 250 lines, no notebook in product docs", async () => {
  const readme = read("README.md");
  assert.ok(readme.split("\n").length <= 250, "README.md is over 250 lines");
  const notebook = [
    /\bissue #?\d+/i,
    /\b(this|the previous|next|last) release\b/i,
    /\brelease before\b/i,
    /\b(this|the next|the previous|that) session\b/i,
    /\bby the machine's clock\b/i,
    /\b(at|about|between) \d{1,2}:\d{2}\b/,
  ];
  const found: string[] = [];
  for (const page of await markdownPages()) {
    for (const pattern of notebook) {
      const match = read(page).match(pattern);
      if (match) found.push(`${page}: "${match[0]}"`);
    }
  }
  assert.deepEqual(found, []);
});
