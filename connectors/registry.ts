/**
 * The registry of destination types: the one list that the admin routes (validation),
 * the connectors, the store's records, the CLI and the delivery engine derive from.
 * Adding a type means adding it here; the compiler then asks for its connector.
 *
 * @module
 */

/** Every destination type (spec 1.7), in the order the API lists them. */
export const DESTINATION_TYPES = ["webhook", "smtp", "sheets_webhook"] as const;

/** A destination type. */
export type DestinationType = typeof DESTINATION_TYPES[number];
