//! gRPC server reflection that lists what a port serves and nothing more,
//! in both versions of the protocol: v1, and v1alpha, which older grpcurl
//! and the stock Python client (grpcio-reflection) speak.
//!
//! Left to itself, tonic-reflection lists every service in the descriptor
//! sets it is given; the workspace's set describes both services' APIs, so
//! each port listed the other's, and a client that lists and then calls got
//! UNIMPLEMENTED. Every file given stays resolvable, by name and by symbol
//! (user.v1 imports order.v2's messages).

use tonic_reflection::pb::{v1, v1alpha};
use tonic_reflection::server::{Builder, Error};

/// The reflection services themselves: both versions are served together,
/// so both are listed.
pub const SERVICES: [&str; 2] = [
    v1::server_reflection_server::SERVICE_NAME,
    v1alpha::server_reflection_server::SERVICE_NAME,
];

/// Reflection v1 and v1alpha, describing the files of `descriptor_sets`
/// (encoded `FileDescriptorSet`s) and their own, and listing `serves` (every
/// service the port serves other than reflection) and the two of
/// [`SERVICES`]. Add both to the port.
pub fn serving(
    descriptor_sets: &[&'static [u8]],
    serves: &[&str],
) -> Result<
    (
        v1::server_reflection_server::ServerReflectionServer<
            impl v1::server_reflection_server::ServerReflection,
        >,
        v1alpha::server_reflection_server::ServerReflectionServer<
            impl v1alpha::server_reflection_server::ServerReflection,
        >,
    ),
    Error,
> {
    let builder = || {
        // Each version's builder would add only its own file: both are
        // given to both, since both are listed.
        let mut b = Builder::configure()
            .include_reflection_service(false)
            .register_encoded_file_descriptor_set(v1::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(v1alpha::FILE_DESCRIPTOR_SET);
        for set in descriptor_sets {
            b = b.register_encoded_file_descriptor_set(set);
        }
        for name in serves.iter().chain(&SERVICES) {
            b = b.with_service_name(*name);
        }
        b
    };
    Ok((builder().build_v1()?, builder().build_v1alpha()?))
}

/// Every method of the services `serves` and of reflection itself, as the
/// paths a gRPC call names (`/package.Service/Method`), read from
/// `descriptor_sets` (encoded `FileDescriptorSet`s): what a port answers,
/// for labelling its metrics by method and nothing else.
pub fn method_paths(descriptor_sets: &[&[u8]], serves: &[&str]) -> Vec<String> {
    use prost::Message as _;
    let sets = descriptor_sets
        .iter()
        .copied()
        .chain([v1::FILE_DESCRIPTOR_SET, v1alpha::FILE_DESCRIPTOR_SET]);
    let mut paths = Vec::new();
    for set in sets {
        let Ok(set) = prost_types::FileDescriptorSet::decode(set) else {
            continue;
        };
        for file in &set.file {
            for service in &file.service {
                let name = match file.package() {
                    "" => service.name().to_owned(),
                    p => format!("{p}.{}", service.name()),
                };
                if !serves.iter().chain(&SERVICES).any(|s| *s == name) {
                    continue;
                }
                for method in &service.method {
                    paths.push(format!("/{name}/{}", method.name()));
                }
            }
        }
    }
    paths.sort();
    paths.dedup();
    paths
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_paths_are_the_methods_of_the_services_served_and_no_others() {
        let paths = super::method_paths(
            &[tonic_health::pb::FILE_DESCRIPTOR_SET],
            &[tonic_health::pb::health_server::SERVICE_NAME],
        );
        assert_eq!(
            paths,
            [
                "/grpc.health.v1.Health/Check",
                "/grpc.health.v1.Health/Watch",
                "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            ]
        );
        // A service in the sets but not served is not listed.
        assert!(super::method_paths(&[tonic_health::pb::FILE_DESCRIPTOR_SET], &[]).len() == 2);
    }
}
