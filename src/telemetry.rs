//! Traces over OpenTelemetry (`[otel]`, off by default): the spans the server opens (`dispatch` and its
//! `dispatch.route`, `dispatch.commit`, `dispatch.forward`; `ingest.frame`; `store.commit`;
//! `runtime.mission` and its `runtime.call`s, each with the mission id where there is one) go to an
//! OTLP/HTTP collector as JSON, in batches from the SDK's own thread. A collector that is down or slow
//! costs dropped spans (the batch queue is bounded), never a request of serve's.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, Tracer};
use opentelemetry_sdk::Resource;

use aiwg_server::config::OtelConfig;

/// The running exporter: spans still queued are sent when it drops (serve's exit).
pub(crate) struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// The exporter `config` names, and the tracer the logging layer sends spans to; `None` when no
    /// endpoint is configured.
    pub(crate) fn start(config: &OtelConfig) -> Result<Option<(Traces, Tracer)>, String> {
        if config.endpoint.is_empty() {
            return Ok(None);
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(format!("{}/v1/traces", config.endpoint.trim_end_matches('/')))
            .build()
            .map_err(|e| format!("cannot start the OTLP exporter for {}: {e}", config.endpoint))?;
        let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(config.sample_ratio)));
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(sampler)
            .with_resource(Resource::builder().with_service_name(config.service_name.clone()).build())
            .build();
        let tracer = provider.tracer("aiwg-serve");
        Ok(Some((Traces { provider }, tracer)))
    }
}

impl Drop for Traces {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("aiwg-serve: the last spans were not all sent: {e}");
        }
    }
}
