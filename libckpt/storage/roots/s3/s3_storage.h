// The s3:// backend: objects in an S3 bucket (AWS, Ceph's RADOS Gateway,
// MinIO, and the S3 endpoints of other clouds), spoken to over HTTP/1.1
// with Signature V4.
//
// URI: s3://BUCKET[/PREFIX][?key=value&...]
//   endpoint=URL      http(s)://host[:port] (default $AWS_ENDPOINT_URL_S3,
//                     $AWS_ENDPOINT_URL, else https://s3.REGION.amazonaws.com)
//   region=R          signing region (default $AWS_REGION, $AWS_DEFAULT_REGION, us-east-1)
//   addressing=auto|path|virtual   bucket in the path or in the host name
//                     (auto: virtual for amazonaws.com, path elsewhere)
//   profile=NAME      section of ~/.aws/credentials (default $AWS_PROFILE, "default")
//   part_size=BYTES   multipart part size (default 16M; raised so a file
//                     fits in 9,000 parts when its size is known)
//   connections=N     requests in flight (default 16)
//   buffer=BYTES      parts waiting to go up, across all files (default
//                     connections x part_size); writers wait beyond it
//   deadline=SECONDS  how long one request is retried (default 120)
//   read_chunk=BYTES  ranged GETs larger than this are split and run in
//                     parallel (default 8M)
//   ca_file=PATH      https: PEM file of the CAs to trust (default
//                     $AWS_CA_BUNDLE, else the system's store)
//
// Credentials, in the AWS CLI's order: AWS_ACCESS_KEY_ID /
// AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, then the profile of
// $AWS_SHARED_CREDENTIALS_FILE (default ~/.aws/credentials). They are never
// logged or put in messages.
//
// How a commit stays atomic without rename is in docs/format.md ("Object
// stores"): every data object is complete before MANIFEST is PUT, LATEST is
// PUT after it, single PUTs are atomic, reads after writes are strong, and
// a step is claimed with a PUT carrying If-None-Match: *.
#ifndef CKPT_STORAGE_ROOTS_S3_S3_STORAGE_H_
#define CKPT_STORAGE_ROOTS_S3_S3_STORAGE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/storage.h"

namespace ckpt {

absl::StatusOr<std::shared_ptr<Storage>> OpenS3Storage(std::string_view uri);

}  // namespace ckpt

#endif  // CKPT_STORAGE_ROOTS_S3_S3_STORAGE_H_
