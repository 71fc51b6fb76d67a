/**
 * Owner notifications: the notifier (events, grouping, sending) and what the admin
 * routes need to validate and show channels.
 *
 * @module
 */
export { type Notifier, startNotifier } from "./notifier.ts";
export { channelsFor, CHAT_TYPES, findOrgDestination } from "./channels.ts";
