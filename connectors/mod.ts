/**
 * The connectors of every destination type (connectors/registry.ts lists the types),
 * each built by its descriptor from the configuration with the outbound guard,
 * closable as a whole.
 *
 * @module
 */
import type { Config } from "../config.ts";
import { createHttpTransport } from "./http_transport.ts";
import { createOutboundGuard } from "./outbound_guard.ts";
import { DESCRIPTORS, type DestinationType } from "./registry.ts";
import type { Connector } from "./types.ts";

/** The connectors of every destination type, closable as a whole. */
export type Connectors = Record<DestinationType, Connector> & { close(): void };

/** Builds every connector from the configuration. */
export function createConnectors(config: Config, options: { caCerts?: string[] } = {}): Connectors {
  const guard = createOutboundGuard({ allowPrivate: config.allowPrivateDestinations });
  const transport = createHttpTransport(guard, { caCerts: options.caCerts });
  const http = { timeoutMs: config.httpTimeoutMs, transport };
  const deps = { config, http, guard, caCerts: options.caCerts };
  const closers: (() => void)[] = [() => transport.close()];
  const connectors = Object.fromEntries(
    DESCRIPTORS.map((
      descriptor,
    ) => [descriptor.type, descriptor.create(deps, (close) => closers.unshift(close))]),
  ) as Record<DestinationType, Connector>;
  return {
    ...connectors,
    close: () => {
      for (const close of closers) close();
    },
  };
}
