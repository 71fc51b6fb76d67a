/** The baseline of bench:ingest: a bare Deno.serve answering 202 with a small JSON body. */
const port = Number(Deno.env.get("PORT") ?? "8001");
const body = JSON.stringify({ ok: true, submissionId: crypto.randomUUID() });
Deno.serve({ port, hostname: "127.0.0.1", onListen() {} }, async (request) => {
  await request.arrayBuffer();
  return new Response(body, { status: 202, headers: { "content-type": "application/json" } });
});
