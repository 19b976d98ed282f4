# bsl-sentinel's image: a static (musl) binary on distroless, running as 65532:65532.
#
#   docker build -t bsl-sentinel:0.1.0 .
#
# deploy/deployment.yaml runs image bsl-sentinel:0.1.0 with args ["serve"]. The build needs
# network access to crates.io (the Cargo.lock is honoured with --locked).

FROM rust:1-bookworm AS build
# ring compiles C and assembly: musl-gcc from musl-tools builds it for the musl target.
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
ENV CC_x86_64_unknown_linux_musl=musl-gcc \
    CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_LINKER=musl-gcc
WORKDIR /src

# Dependencies first, in their own layer: it is rebuilt only when Cargo.toml or Cargo.lock
# change. Empty lib/main stand in for the sources (tests/ and examples are never built here).
COPY Cargo.toml Cargo.lock ./
RUN mkdir src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
 && cargo build --release --locked --target x86_64-unknown-linux-musl --bin bsl-sentinel \
 && rm -rf src

COPY src ./src
RUN touch src/main.rs src/lib.rs \
 && cargo build --release --locked --target x86_64-unknown-linux-musl --bin bsl-sentinel \
 && cp target/x86_64-unknown-linux-musl/release/bsl-sentinel /bsl-sentinel \
 && /bsl-sentinel --version

# distroless static: CA certificates and /etc/passwd for nonroot, no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /bsl-sentinel /bsl-sentinel
USER 65532:65532
EXPOSE 8443 8080
ENTRYPOINT ["/bsl-sentinel"]
CMD ["serve"]
