import type { Config } from "../../config.ts";
import { testConfig } from "./config.ts";
import { createLogger } from "../../log.ts";
import { type Service, startService } from "../../service.ts";
import { createOrg } from "../../store/orgs.ts";

/** A service on an in-memory KV with one organization, and request helpers. */
export interface Harness extends AsyncDisposable {
  service: Service;
  config: Config;
  orgId: string;
  tenantKey: string;
  /** Every log line written so far. */
  logs: string[];
  /** A request through the app, no server. */
  request(path: string, init?: RequestInit): Promise<Response>;
  /** An admin request with the harness's tenant key (or the given one). */
  admin(
    method: string,
    path: string,
    body?: unknown,
    options?: { tenantKey?: string },
  ): Promise<Response>;
  /** Creates a form and returns its view. */
  createForm(settings?: Record<string, unknown>): Promise<FormView>;
  /** Adds a destination and returns its id. */
  addDestination(formId: string, body: Record<string, unknown>): Promise<string>;
  /** Posts a JSON submission. */
  submit(publicKey: string, payload: unknown, headers?: Record<string, string>): Promise<Response>;
  close(): Promise<void>;
}

/** The form fields tests use. */
export interface FormView {
  id: string;
  publicKey: string;
  name: string;
  [field: string]: unknown;
}

/** Starts a harness; `await using h = await startHarness()` closes it. */
export async function startHarness(
  overrides: Partial<Config> = {},
  options: { deliver?: boolean; caCerts?: string[]; queues?: boolean; now?: () => number } = {},
): Promise<Harness> {
  const config = testConfig({ retryScheduleMs: [20, 40, 60], sweepIntervalMs: 200, ...overrides });
  const logs: string[] = [];
  const logger = createLogger("debug", (line) => logs.push(line));
  const service = await startService(config, { ...options, logger });
  const { orgId, tenantKey } = await createOrg(service.db, "Test org");
  const request = async (path: string, init?: RequestInit) => await service.app.request(path, init);
  const admin: Harness["admin"] = (method, path, body, opts) =>
    request(`/v1/admin${path}`, {
      method,
      headers: {
        "x-tenant-key": opts?.tenantKey ?? tenantKey,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  let closed = false;
  const harness: Harness = {
    service,
    config,
    orgId,
    tenantKey,
    logs,
    request,
    admin,
    async createForm(settings = {}) {
      const response = await admin("POST", "/forms", { name: "Contact", ...settings });
      const body = await response.json();
      if (response.status !== 200) throw new Error(`createForm: ${JSON.stringify(body)}`);
      return body.form;
    },
    async addDestination(formId, body) {
      const response = await admin("POST", `/forms/${formId}/destinations`, body);
      const answer = await response.json();
      if (response.status !== 200) throw new Error(`addDestination: ${JSON.stringify(answer)}`);
      return answer.destination.id;
    },
    submit(publicKey, payload, headers = {}) {
      return request(`/v1/f/${publicKey}`, {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
        body: JSON.stringify(payload),
      });
    },
    async close() {
      if (closed) return;
      closed = true;
      await service.close();
    },
    [Symbol.asyncDispose]() {
      return harness.close();
    },
  };
  return harness;
}
