import assert from "node:assert/strict";
import { ENVELOPE } from "./tests/helpers/connector_sink.ts";
import { describeFault, isTemplateFault, parseTemplate, renderTemplate } from "./template.ts";

const style = {
  escape: (value: string) => value.replaceAll("<", "&lt;"),
  fieldList: () => "[list]",
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
