/** How many keys a KV holds under `[prefix]`. */
export async function countKeys(kv: Deno.Kv, prefix: string): Promise<number> {
  let n = 0;
  for await (const _ of kv.list({ prefix: [prefix] })) n++;
  return n;
}
