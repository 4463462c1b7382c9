// The server's setup (GET /v1/config): the model, the tools, and the currency costs are shown in. Costs are
// kept in USD; a cost shown is `usd * per_usd` in that currency, and an unknown cost (null) is "unknown",
// never 0, which would read as free.

import { getJSON } from './api.js';

export const config = { version: '', model: '', tools: [], currency: { code: 'USD', symbol: '$', per_usd: 1 } };

export async function loadConfig() {
  try {
    const c = await getJSON('v1/config');
    if (c && typeof c === 'object') {
      Object.assign(config, c);
      const cur = c.currency || {};
      config.currency = { code: String(cur.code || 'USD'), symbol: String(cur.symbol || '$'),
                          per_usd: typeof cur.per_usd === 'number' && cur.per_usd > 0 ? cur.per_usd : 1 };
    }
  } catch (e) { /* an older server: USD */ }
  return config;
}

/** A USD cost in the configured currency: "€0.0123", or "unknown" for null. */
export function money(usd) {
  if (typeof usd !== 'number' || !isFinite(usd)) return 'unknown';
  const v = usd * config.currency.per_usd;
  const digits = v === 0 ? 2 : Math.abs(v) < 0.01 ? 4 : Math.abs(v) < 1 ? 3 : 2;
  return config.currency.symbol + v.toFixed(digits);
}
