//! `[pricing."MODEL"]`: what a model's usage costs where its executor reports no cost.

use serde::{Deserialize, Serialize};

use super::Config;

/// One `[pricing."MODEL"]`: US dollars per million tokens. Cached tokens are part of input; those read
/// from or written to the cache cost what input does unless priced apart.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PriceConfig {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_per_mtok: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_per_mtok: Option<f64>,
}

/// The highest price a model may have, in dollars per million tokens: far above any model's, and low
/// enough that a million tokens of each kind cost within what a row keeps (`aiwg_domain::usage`).
pub(crate) const MAX_PRICE_PER_MTOK: f64 = 1_000_000.0;

impl Config {
    /// The price table as the domain takes it (micro-dollars per million tokens).
    pub fn pricing(&self) -> aiwg_domain::usage::Pricing {
        use aiwg_domain::usage::{micros, Price, Pricing};
        let prices = self.pricing.iter().map(|(model, p)| {
            let input = micros(p.input_per_mtok);
            let price = Price {
                input,
                output: micros(p.output_per_mtok),
                cache_read: p.cache_read_per_mtok.map_or(input, micros),
                cache_creation: p.cache_creation_per_mtok.map_or(input, micros),
            };
            (model.clone(), price)
        });
        Pricing(prices.collect())
    }
}
