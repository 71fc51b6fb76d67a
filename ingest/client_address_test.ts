import assert from "node:assert/strict";
import { clientAddress, type ClientAddressRule } from "./client_address.ts";

const remote = (hostname: string): Deno.NetAddr => ({ transport: "tcp", hostname, port: 4711 });
const direct: ClientAddressRule = { header: null, trustedProxyHops: 1 };
const forwarded = (hops: number): ClientAddressRule => ({
  header: "x-forwarded-for",
  trustedProxyHops: hops,
});

Deno.test("by default the connection's address is the client's, whatever the headers say", () => {
  assert.deepEqual(clientAddress(direct, "198.51.100.1", remote("203.0.113.9")), {
    ip: "203.0.113.9",
    key: "203.0.113.9",
  });
});

Deno.test("X-Forwarded-For is read from the right, counting trusted hops", () => {
  const value = "6.6.6.6, 198.51.100.7, 203.0.113.2";
  assert.equal(clientAddress(forwarded(1), value, remote("10.0.0.1")).ip, "203.0.113.2");
  assert.equal(clientAddress(forwarded(2), value, remote("10.0.0.1")).ip, "198.51.100.7");
});

Deno.test("fewer X-Forwarded-For entries than trusted hops: the connection's address", () => {
  // With two proxies, one entry was written by the first proxy's client or by no proxy
  // at all: nothing in it is known to be a proxy's.
  assert.equal(clientAddress(forwarded(2), "6.6.6.6", remote("10.0.0.1")).ip, "10.0.0.1");
  assert.equal(clientAddress(forwarded(2), "6.6.6.6", remote("10.0.0.1")).key, "10.0.0.1");
  assert.equal(
    clientAddress(forwarded(5), "6.6.6.6, 198.51.100.7", remote("10.0.0.1")).ip,
    "10.0.0.1",
  );
  assert.equal(
    clientAddress(forwarded(2), "6.6.6.6, 198.51.100.7", remote("10.0.0.1")).ip,
    "6.6.6.6",
  );
});

Deno.test("IPv4 written as IPv6 (mapped, NAT64) counts as its IPv4 address", () => {
  const key = (ip: string) => clientAddress(direct, undefined, remote(ip)).key;
  assert.equal(key("::ffff:c633:6407"), "198.51.100.7");
  assert.equal(key("::FFFF:C633:6408"), "198.51.100.8");
  assert.equal(key("0:0:0:0:0:ffff:c633:6407"), "198.51.100.7");
  assert.equal(key("64:ff9b::c633:6407"), "198.51.100.7");
  assert.equal(key("64:ff9b::198.51.100.9"), "198.51.100.9");
  assert.equal(key("0064:ff9b:0000::c633:6409"), "198.51.100.9");
  // Other addresses of those prefixes' neighbours stay IPv6 /64s.
  assert.equal(key("64:ff9b:1::c633:6407"), "64:ff9b:1:0::/64");
  assert.equal(key("::fffe:c633:6407"), "0:0:0:0::/64");
  // Each mapped address its own key: 256 of them are 256 clients, not one.
  const keys = new Set(
    Array.from({ length: 256 }, (_, i) => key(`::ffff:c633:64${i.toString(16).padStart(2, "0")}`)),
  );
  assert.equal(keys.size, 256);
});

Deno.test("a named header that is missing or not an address falls back to the connection", () => {
  const rule: ClientAddressRule = { header: "cf-connecting-ip", trustedProxyHops: 1 };
  assert.equal(clientAddress(rule, undefined, remote("10.0.0.1")).ip, "10.0.0.1");
  assert.equal(clientAddress(rule, "not an address", remote("10.0.0.1")).ip, "10.0.0.1");
  assert.equal(clientAddress(rule, "[2001:db8::5]:443", remote("10.0.0.1")).ip, "2001:db8::5");
  assert.equal(clientAddress(rule, "203.0.113.4:80", remote("10.0.0.1")).ip, "203.0.113.4");
});

Deno.test("IPv6 clients are counted per /64", () => {
  const key = (ip: string) => clientAddress(direct, undefined, remote(ip)).key;
  assert.equal(key("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
  assert.equal(key("2001:0db8:0001:0002:ffff:ffff:ffff:ffff"), "2001:db8:1:2::/64");
  assert.equal(key("2001:db8::1"), "2001:db8:0:0::/64");
  assert.equal(key("::1"), "0:0:0:0::/64");
  assert.equal(key("::1:2:3:4:5:1.2.3.4"), "0:1:2:3::/64");
  assert.equal(key("::ffff:203.0.113.8"), "203.0.113.8");
  assert.equal(clientAddress(direct, undefined, undefined).key, "");
});
