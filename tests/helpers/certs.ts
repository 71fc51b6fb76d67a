/**
 * A throw-away CA and a localhost server certificate signed by it, made with the
 * `openssl` CLI in a temp dir. Deno refuses a self-signed leaf (CaUsedAsEndEntity),
 * hence the two levels; trust the CA through `caCerts`.
 *
 * @module
 */

/** PEM texts of the test PKI. */
export interface TestCertificates {
  /** The CA certificate, for the client's `caCerts`. */
  ca: string;
  /** The server certificate (DNS:localhost, IP:127.0.0.1). */
  cert: string;
  /** The server's private key. */
  key: string;
}

let cached: Promise<TestCertificates> | undefined;

/** Generates the test PKI once per process (about a second of openssl work). */
export function testCertificates(): Promise<TestCertificates> {
  cached ??= generate();
  return cached;
}

async function generate(): Promise<TestCertificates> {
  const dir = await Deno.makeTempDir({ prefix: "formrelay-certs-" });
  try {
    const path = (name: string) => `${dir}/${name}`;
    await Deno.writeTextFile(
      path("leaf.ext"),
      "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n" +
        "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n" +
        "authorityKeyIdentifier=keyid\n",
    );
    await openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", path("ca.key")]);
    await openssl([
      "req",
      "-new",
      "-x509",
      "-key",
      path("ca.key"),
      "-subj",
      "/CN=formrelay test CA",
      "-days",
      "2",
      "-extensions",
      "v3_ca",
      "-config",
      await minimalConfig(dir),
      "-out",
      path("ca.pem"),
    ]);
    await openssl([
      "ecparam",
      "-name",
      "prime256v1",
      "-genkey",
      "-noout",
      "-out",
      path("leaf.key"),
    ]);
    await openssl([
      "req",
      "-new",
      "-key",
      path("leaf.key"),
      "-subj",
      "/CN=localhost",
      "-config",
      await minimalConfig(dir),
      "-out",
      path("leaf.csr"),
    ]);
    await openssl([
      "x509",
      "-req",
      "-in",
      path("leaf.csr"),
      "-CA",
      path("ca.pem"),
      "-CAkey",
      path("ca.key"),
      "-CAcreateserial",
      "-days",
      "2",
      "-extfile",
      path("leaf.ext"),
      "-out",
      path("leaf.pem"),
    ]);
    return {
      ca: await Deno.readTextFile(path("ca.pem")),
      cert: await Deno.readTextFile(path("leaf.pem")),
      key: await Deno.readTextFile(path("leaf.key")),
    };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** An openssl config of our own, so the host's openssl.cnf does not matter. */
async function minimalConfig(dir: string): Promise<string> {
  const file = `${dir}/openssl.cnf`;
  await Deno.writeTextFile(
    file,
    "[req]\ndistinguished_name=dn\nprompt=no\n[dn]\nCN=unused\n" +
      "[v3_ca]\nbasicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n" +
      "subjectKeyIdentifier=hash\n",
  );
  return file;
}

async function openssl(args: string[]): Promise<void> {
  const { code, stderr } = await new Deno.Command("openssl", {
    args,
    stdout: "null",
    stderr: "piped",
  })
    .output();
  if (code !== 0) {
    throw new Error(`openssl ${args[0]} failed: ${new TextDecoder().decode(stderr).trim()}`);
  }
}
