import assert from "node:assert/strict";
import { ENVELOPE } from "./tests/helpers/connector_sink.ts";
import {
  cutValue,
  describeFault,
  isTemplateFault,
  parseTemplate,
  renderTemplate,
} from "./template.ts";

const style = {
  escape: (value: string) => value.replaceAll("<", "&lt;"),
  fieldList: () => "[list]",
  maxFieldChars: 1000,
  maxChars: 4000,
};

Deno.test("a template renders its placeholders, escaping values and never the tenant's text", () => {
  const parts = parseTemplate("<b>{{ formName }}</b> {{fields.name}}|{{fields.none}}|{{fields}}");
  assert.ok(!isTemplateFault(parts));
  const envelope = { ...ENVELOPE, formName: "<Contact>", payload: { name: "<i>Ada</i>" } };
  assert.equal(
    renderTemplate(parts, envelope, style),
    "<b>&lt;Contact></b> &lt;i>Ada&lt;/i>||[list]",
  );
});

Deno.test("a fault names the placeholder and where it is", () => {
  const unknown = parseTemplate("Hello\n  {{nope}}");
  assert.ok(isTemplateFault(unknown));
  assert.match(
    describeFault(unknown),
    /^Unknown placeholder "\{\{nope\}\}".*\(line 2, column 3\)$/,
  );
  const open = parseTemplate("{{formName}} {{fields.a");
  assert.ok(isTemplateFault(open));
  assert.equal(describeFault(open), 'A "{{" is not closed by "}}" (line 1, column 14)');
});

Deno.test("lenient parsing keeps unknown placeholders and an unclosed {{ as text", () => {
  const parts = parseTemplate("{{nope}} {{formName}} {{x", { lenient: true });
  assert.ok(!isTemplateFault(parts));
  assert.equal(renderTemplate(parts, ENVELOPE, style), `{{nope}} ${ENVELOPE.formName} {{x`);
});

Deno.test("the worst template renders no more than its limit: values cut before escaping, each worked out once", () => {
  // The largest accepted template naming one field as often as it can, a 128 KB value.
  const parts = parseTemplate("{{fields.x}}".repeat(340) + "{{fields}}");
  assert.ok(!isTemplateFault(parts));
  const envelope = { ...ENVELOPE, payload: { x: "&".repeat(128 * 1024) } };
  const escaped: number[] = [];
  let lists = 0;
  const rendered = renderTemplate(parts, envelope, {
    escape: (value) => {
      escaped.push(value.length);
      return value.replaceAll("&", "&amp;");
    },
    fieldList: () => {
      lists++;
      return "[list]";
    },
    maxFieldChars: 300,
    maxChars: 4000,
  });
  // Cut to 299 characters and an ellipsis before escaping, and escaped once.
  assert.deepEqual(escaped, [300]);
  const value = "&amp;".repeat(299) + "…";
  // Rendering stopped after the part that took the text past the limit.
  assert.equal(rendered, value.repeat(Math.ceil(4001 / value.length)));
  assert.equal(lists, 0);
});

Deno.test("a value longer than the limit is escaped only as far as the limit needs", () => {
  const parts = parseTemplate("{{fields.x}}".repeat(341));
  assert.ok(!isTemplateFault(parts));
  const envelope = { ...ENVELOPE, payload: { x: "&".repeat(128 * 1024) } };
  let escapedChars = 0;
  const rendered = renderTemplate(parts, envelope, {
    escape: (value) => {
      escapedChars += value.length;
      return value.replaceAll("&", "&amp;");
    },
    fieldList: () => "",
    maxFieldChars: 100_000,
    maxChars: 4000,
  });
  // Slices of the 100 000 characters kept, escaped until they pass the limit: one here.
  assert.equal(escapedChars, 1024);
  assert.equal(rendered, "&amp;".repeat(1024));
});

Deno.test("{{fields}} is worked out once however often the template names it", () => {
  const parts = parseTemplate("{{fields}} {{fields}} {{formName}} {{fields}}");
  assert.ok(!isTemplateFault(parts));
  let lists = 0;
  const rendered = renderTemplate(parts, ENVELOPE, {
    ...style,
    fieldList: () => `[list ${++lists}]`,
  });
  assert.equal(rendered, `[list 1] [list 1] ${ENVELOPE.formName} [list 1]`);
});

Deno.test("cutValue keeps short text and cuts long text with an ellipsis, never inside a pair", () => {
  assert.equal(cutValue("abc", 3), "abc");
  assert.equal(cutValue("abcd", 3), "ab…");
  assert.equal(cutValue("a😀b", 3), "a…");
  assert.equal(cutValue("abcd", 1), "…");
});
