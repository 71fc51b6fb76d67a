/** The service version, sent as `User-Agent: formrelay/<version>`. */
export const VERSION = "0.1.0";
