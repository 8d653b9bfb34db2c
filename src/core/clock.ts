/** Wall-clock time in milliseconds since the epoch; injected so tests can move time themselves. */
export type Clock = () => number;
