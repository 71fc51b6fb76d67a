import assert from "node:assert/strict";
import {
  checkDestinationHost,
  isBlockedAddress,
  PRIVATE_DESTINATIONS_HINT,
  type ResolveAddresses,
} from "./outbound_guard.ts";
import { DeliveryError } from "./types.ts";

const BLOCKED: [address: string, reason: RegExp][] = [
  // IPv4
  ["127.0.0.1", /^a loopback address$/],
  ["127.255.255.254", /loopback/],
  ["10.0.0.1", /^a private address$/],
  ["10.255.255.255", /private/],
  ["172.16.0.1", /private/],
  ["172.31.255.255", /private/],
  ["192.168.1.1", /private/],
  ["169.254.0.1", /^a link-local address$/],
  ["169.254.169.254", /link-local/],
  ["100.64.0.1", /^a shared \(CGNAT\) address$/],
  ["100.127.255.255", /CGNAT/],
  ["224.0.0.1", /^a multicast address$/],
  ["239.255.255.250", /multicast/],
  ["0.0.0.0", /^an unspecified address$/],
  ["0.1.2.3", /unspecified/],
  ["255.255.255.255", /^a broadcast address$/],
  ["240.0.0.1", /^a reserved address$/],
  ["192.0.0.8", /reserved/],
  ["198.18.0.1", /reserved/],
  ["198.19.255.255", /reserved/],
  ["192.88.99.1", /reserved/],
  ["192.0.2.1", /^a documentation address$/],
  ["198.51.100.7", /documentation/],
  ["203.0.113.9", /documentation/],
  // IPv4 in the legacy forms a URL (and getaddrinfo) accepts
  ["127.1", /loopback/],
  ["0x7f.0.0.1", /loopback/],
  ["2130706433", /loopback/],
  ["0177.0.0.1", /loopback/],
  ["012.0.0.1", /private/],
  // IPv6
  ["::1", /^a loopback address$/],
  ["[::1]", /loopback/],
  ["0:0:0:0:0:0:0:1", /loopback/],
  ["::", /^an unspecified address$/],
  ["[::]", /unspecified/],
  ["fc00::1", /^a private address$/],
  ["fd12:3456:789a::1", /private/],
  ["fe80::1", /^a link-local address$/],
  ["fe80::1%eth0", /link-local/],
  ["febf:ffff::1", /link-local/],
  ["fec0::1", /private/],
  ["ff02::1", /^a multicast address$/],
  ["ff0e::101", /multicast/],
  ["2001:db8::1", /documentation/],
  ["3fff::1", /documentation/],
  ["100::1", /reserved/],
  ["2001::1", /reserved/],
  ["1::", /reserved/],
  ["4000::1", /reserved/],
  ["5f00::1", /reserved/],
  // IPv4 inside IPv6
  ["::ffff:127.0.0.1", /^a loopback address \(IPv4-mapped 127\.0\.0\.1\)$/],
  ["::ffff:7f00:1", /loopback address \(IPv4-mapped 127\.0\.0\.1\)/],
  ["[::ffff:7f00:1]", /loopback/],
  ["0:0:0:0:0:ffff:7f00:0001", /loopback/],
  ["::ffff:10.1.2.3", /private address \(IPv4-mapped/],
  ["::ffff:a9fe:a9fe", /link-local address \(IPv4-mapped 169\.254\.169\.254\)/],
  ["::ffff:0.0.0.0", /unspecified/],
  ["::ffff:0:7f00:1", /loopback address \(IPv4-translated/],
  ["::127.0.0.1", /loopback address \(IPv4-compatible 127\.0\.0\.1\)/],
  ["::7f00:1", /loopback/],
  ["::8.8.8.8", /^a deprecated IPv4-compatible address$/],
  ["64:ff9b::127.0.0.1", /loopback address \(NAT64 127\.0\.0\.1\)/],
  ["64:ff9b::a9fe:a9fe", /link-local address \(NAT64 169\.254\.169\.254\)/],
  ["64:ff9b::c0a8:101", /private address \(NAT64 192\.168\.1\.1\)/],
  ["64:ff9b:1::8.8.8.8", /^a local-use NAT64 address$/],
  ["2002:7f00:1::1", /loopback address \(6to4 127\.0\.0\.1\)/],
  ["2002:a00:1::", /private address \(6to4 10\.0\.0\.1\)/],
  // Not addresses at all
  ["", /not an IP address/],
  ["example.com", /not an IP address/],
  ["1.2.3.4.5", /not an IP address/],
  ["256.1.1.1", /not an IP address/],
  ["::1::2", /not an IP address/],
  ["1:2:3:4:5:6:7:8:9", /not an IP address/],
  ["12345::1", /not an IP address/],
  ["::ffff:300.0.0.1", /not an IP address/],
  ["gggg::1", /not an IP address/],
];

const ALLOWED = [
  "8.8.8.8",
  "1.1.1.1",
  "9.9.9.9",
  "93.184.216.34",
  "100.63.255.255",
  "100.128.0.0",
  "172.15.255.255",
  "172.32.0.0",
  "192.167.255.255",
  "192.169.0.0",
  "169.253.255.255",
  "223.255.255.255",
  "11.0.0.1",
  "126.255.255.255",
  "128.0.0.1",
  "2606:4700::1",
  "[2606:4700::1]",
  "2606:4700:4700::1111",
  "2001:4860:4860::8888",
  "2a00:1450:4001:80e::200e",
  "2400:cb00::1",
  "::ffff:8.8.8.8",
  "::ffff:808:808",
  "64:ff9b::8.8.8.8",
  "2002:808:808::1",
];

Deno.test("isBlockedAddress names why special-purpose addresses are refused", async (t) => {
  for (const [address, reason] of BLOCKED) {
    await t.step(JSON.stringify(address), () => {
      const result = isBlockedAddress(address);
      assert.notEqual(result, null, `${address} should be blocked`);
      assert.match(result!, reason);
    });
  }
});

Deno.test("isBlockedAddress lets public addresses through", async (t) => {
  for (const address of ALLOWED) {
    await t.step(address, () => {
      assert.equal(isBlockedAddress(address), null);
    });
  }
});

async function refusal(hostname: string, resolve?: ResolveAddresses): Promise<DeliveryError> {
  try {
    await checkDestinationHost(hostname, { allowPrivate: false, resolve });
  } catch (error) {
    assert.ok(error instanceof DeliveryError, `Expected a DeliveryError, got ${error}`);
    return error;
  }
  throw new Error(`Expected "${hostname}" to be refused`);
}

/** A resolver answering from a table; a name it does not know has no records. */
function fakeDns(table: Record<string, { A?: string[]; AAAA?: string[] }>): ResolveAddresses {
  return (hostname, recordType) => {
    const addresses = table[hostname]?.[recordType];
    if (addresses === undefined) {
      return Promise.reject(new Deno.errors.NotFound(`no records found for ${hostname}`));
    }
    return Promise.resolve(addresses);
  };
}

const resolveNothing: ResolveAddresses = () => {
  throw new Error("Nothing should be resolved");
};

Deno.test("checkDestinationHost refuses IP literals and localhost permanently", async (t) => {
  const cases: [string, string][] = [
    ["127.0.0.1", 'Destination address is not allowed: "127.0.0.1" is a loopback address'],
    ["[::1]", 'Destination address is not allowed: "::1" is a loopback address'],
    ["::1", 'Destination address is not allowed: "::1" is a loopback address'],
    ["localhost", 'Destination address is not allowed: "localhost" is a loopback address'],
    ["LocalHost.", 'Destination address is not allowed: "localhost" is a loopback address'],
    ["api.localhost", 'Destination address is not allowed: "api.localhost" is a loopback address'],
    [
      "169.254.169.254",
      'Destination address is not allowed: "169.254.169.254" is a link-local address',
    ],
    ["0x7f.1", 'Destination address is not allowed: "127.0.0.1" is a loopback address'],
    ["2130706433", 'Destination address is not allowed: "127.0.0.1" is a loopback address'],
    [
      "[::ffff:127.0.0.1]",
      'Destination address is not allowed: "::ffff:127.0.0.1" is a loopback address (IPv4-mapped 127.0.0.1)',
    ],
    ["10.1.2.3", 'Destination address is not allowed: "10.1.2.3" is a private address'],
    ["[fd00::1]", 'Destination address is not allowed: "fd00::1" is a private address'],
    ["0.0.0.0", 'Destination address is not allowed: "0.0.0.0" is an unspecified address'],
  ];
  for (const [hostname, message] of cases) {
    await t.step(hostname, async () => {
      const error = await refusal(hostname, resolveNothing);
      assert.equal(error.permanent, true);
      assert.equal(error.message, message + PRIVATE_DESTINATIONS_HINT);
    });
  }
});

Deno.test("checkDestinationHost lets public IP literals through without resolving", async () => {
  for (const hostname of ["8.8.8.8", "1.1.1.1", "[2606:4700::1]", "2606:4700::1"]) {
    await checkDestinationHost(hostname, { allowPrivate: false, resolve: resolveNothing });
  }
});

Deno.test("checkDestinationHost refuses invalid host names permanently", async () => {
  for (const hostname of ["", "exa mple.com", "a/b", "[::1::2]", "user@host"]) {
    const error = await refusal(hostname, resolveNothing);
    assert.equal(error.permanent, true);
    assert.match(error.message, /not a valid host name/);
  }
});

Deno.test("checkDestinationHost allows everything with allowPrivate, resolving nothing", async () => {
  for (const hostname of ["127.0.0.1", "localhost", "[::1]", "169.254.169.254", "hooks.example"]) {
    await checkDestinationHost(hostname, { allowPrivate: true, resolve: resolveNothing });
  }
});

Deno.test("checkDestinationHost resolves names and refuses any blocked address", async (t) => {
  const resolve = fakeDns({
    "public.example": { A: ["93.184.216.34"], AAAA: ["2606:2800:220:1::1"] },
    "v4only.example": { A: ["93.184.216.34"] },
    "internal.example": { A: ["10.0.0.5"] },
    "metadata.example": { A: ["169.254.169.254"] },
    "mixed.example": { A: ["93.184.216.34", "127.0.0.1"] },
    "v6private.example": { A: ["93.184.216.34"], AAAA: ["fd00::5"] },
    "mapped.example": { AAAA: ["::ffff:7f00:1"] },
  });
  await t.step("public names pass", async () => {
    await checkDestinationHost("public.example", { allowPrivate: false, resolve });
    await checkDestinationHost("v4only.example", { allowPrivate: false, resolve });
    await checkDestinationHost("PUBLIC.example.", { allowPrivate: false, resolve });
  });
  const refused: [string, string][] = [
    ["internal.example", '"internal.example" resolves to "10.0.0.5", a private address'],
    ["metadata.example", '"metadata.example" resolves to "169.254.169.254", a link-local address'],
    ["mixed.example", '"mixed.example" resolves to "127.0.0.1", a loopback address'],
    ["v6private.example", '"v6private.example" resolves to "fd00::5", a private address'],
    ["mapped.example", '"mapped.example" resolves to "::ffff:7f00:1", a loopback address'],
  ];
  for (const [hostname, detail] of refused) {
    await t.step(hostname, async () => {
      const error = await refusal(hostname, resolve);
      assert.equal(error.permanent, true);
      assert.ok(
        error.message.startsWith(`Destination address is not allowed: ${detail}`),
        error.message,
      );
    });
  }
});

Deno.test("checkDestinationHost treats resolution failures as transient", async (t) => {
  await t.step("no such name", async () => {
    const error = await refusal("missing.example", fakeDns({}));
    assert.equal(error.permanent, false);
    assert.equal(error.message, 'Cannot resolve "missing.example": no address found');
  });
  await t.step("no network", async () => {
    const error = await refusal("hooks.example", () => {
      return Promise.reject(new Error("connection refused"));
    });
    assert.equal(error.permanent, false);
    assert.equal(error.message, 'Cannot resolve "hooks.example": connection refused');
  });
  await t.step("one family fails: closed, not half-checked", async () => {
    const error = await refusal("hooks.example", (_hostname, recordType) => {
      if (recordType === "A") return Promise.resolve(["93.184.216.34"]);
      return Promise.reject(new Error("timed out"));
    });
    assert.equal(error.permanent, false);
  });
});

Deno.test("a refused private address names ALLOW_PRIVATE_DESTINATIONS and says it is for development", async () => {
  const error = await refusal("127.0.0.1", resolveNothing);
  assert.match(error.message, /ALLOW_PRIVATE_DESTINATIONS=true, meant for development/);
  const invalid = await refusal("exa mple.com", resolveNothing);
  assert.doesNotMatch(invalid.message, /ALLOW_PRIVATE_DESTINATIONS/);
});
