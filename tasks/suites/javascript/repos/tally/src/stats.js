"use strict";

/** The middle value of values; for an even count, the mean of the two middle values. undefined for none. */
function median(values) {
  if (values.length === 0) {
    return undefined;
  }
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  if (sorted.length % 2 === 0) {
    return (sorted[mid - 1] + sorted[mid]) / 2;
  }
  return sorted[mid];
}

/** The median of values, or fallback when there are none. */
function medianOr(values, fallback) {
  const m = median(values);
  return m === undefined ? fallback : m;
}

module.exports = { median, medianOr };
