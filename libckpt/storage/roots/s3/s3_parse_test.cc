// The pieces of the s3:// backend that need no server: Signature V4
// against AWS's published example, the XML and INI readers on good and
// hostile input, the listing checks against foreign keys, and the URI's
// options and credentials.
#include "storage/roots/s3/s3_parse.h"

#include <fstream>
#include <map>
#include <random>

#include "ckpt/storage.h"
#include "storage/roots/s3/s3_sign.h"
#include "testutil/test_util.h"

namespace ckpt::testing {
namespace {

// The GET Object example of AWS's SigV4 documentation ("Example: GET
// Object", bytes 0-9 of examplebucket/test.txt).
TEST(SigV4, MatchesTheDocumentedGetObjectExample) {
  S3Credentials creds{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "", "test"};
  SigV4Request req;
  req.method = "GET";
  req.canonical_uri = "/test.txt";
  req.payload_hash = Sha256Hex("");
  req.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
                 {"Range", "bytes=0-9"},
                 {"x-amz-content-sha256", req.payload_hash},
                 {"x-amz-date", "20130524T000000Z"}};
  EXPECT_EQ(req.payload_hash, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(SigV4Authorization(req, creds, "us-east-1", "20130524T000000Z"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4, EncodesPathsAndQueriesTheWayS3Does) {
  EXPECT_EQ(S3UriEncode("a b/c~d_e.f-g+h=i&j%", true), "a%20b/c~d_e.f-g%2Bh%3Di%26j%25");
  EXPECT_EQ(S3UriEncode("a/b", false), "a%2Fb");
  EXPECT_EQ(S3UriEncode("\xc3\xa9", true), "%C3%A9");
  EXPECT_EQ(S3CanonicalQuery({{"uploadId", "x/y"}, {"partNumber", "3"}, {"uploads", ""}}),
            "partNumber=3&uploadId=x%2Fy&uploads=");
  EXPECT_EQ(AmzDate(0), "19700101T000000Z");
  EXPECT_EQ(Md5Base64(""), "1B2M2Y8AsgTpgAmY7PhCfg==");
}

TEST(S3Xml, ReadsListingsWithPagesPrefixesAndEntities) {
  const std::string xml =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name>"
      "<Prefix>run/</Prefix><KeyCount>3</KeyCount><IsTruncated>true</IsTruncated>"
      "<NextContinuationToken>tok&amp;1</NextContinuationToken>"
      "<Contents><Key>run/LATEST</Key><Size>45</Size><ETag>&quot;abc&quot;</ETag></Contents>"
      "<Contents><Key>run/a&lt;b&#x20;&#233;</Key><Size>0</Size></Contents>"
      "<CommonPrefixes><Prefix>run/step-0000000001/</Prefix></CommonPrefixes>"
      "</ListBucketResult>";
  auto page = ParseListObjectsV2(xml);
  ASSERT_OK(page);
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].key, "run/LATEST");
  EXPECT_EQ(page->objects[0].size, 45u);
  EXPECT_EQ(page->objects[1].key, "run/a<b \xc3\xa9");
  ASSERT_EQ(page->prefixes.size(), 1u);
  EXPECT_EQ(page->prefixes[0], "run/step-0000000001/");
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_token, "tok&1");
}

TEST(S3Xml, HostileBodiesAreErrorsNotCrashes) {
  for (const std::string bad : {
           "",                                                                          // nothing
           "<ListBucketResult><Contents><Key>x</Key><Size>-1</Size></Contents>",        // negative size
           "<ListBucketResult><Contents><Key>x</Key><Size>1</Size>",                    // unterminated
           "<ListBucketResult><Contents><Key>a&bogus;</Key><Size>1</Size></Contents>",  // unknown entity
           "<ListBucketResult><Contents><Key>&#99999999;</Key><Size>1</Size></Contents>",
           "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",  // no token
           "<ListBucketResult><IsTruncated>maybe</IsTruncated></ListBucketResult>",
           "<ListBucketResult><Contents",
       }) {
    auto page = ParseListObjectsV2(bad);
    EXPECT_FALSE(page.ok()) << bad;
  }
  EXPECT_FALSE(ParseListMultipartUploads("<ListMultipartUploadsResult><Upload><Key>k</Key></Upload>").ok());
  EXPECT_FALSE(ParseInitiateMultipartUpload("<InitiateMultipartUploadResult/>").ok());
  auto up = ParseListMultipartUploads(
      "<ListMultipartUploadsResult><Upload><Key>k</Key><UploadId>2~x</UploadId>"
      "<Initiated>2026-12-02T05:30:00.000Z</Initiated></Upload><IsTruncated>false</IsTruncated>"
      "</ListMultipartUploadsResult>");
  ASSERT_OK(up);
  ASSERT_EQ(up->uploads.size(), 1u);
  EXPECT_EQ(up->uploads[0].upload_id, "2~x");
  EXPECT_EQ(ParseIso8601(up->uploads[0].initiated), 1796189400);
  EXPECT_EQ(ParseIso8601("2026-13-02T05:30:00Z"), -1);
  const S3ErrorBody e = ParseS3Error(
      "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>gone &amp; lost</Message>"
      "<RequestId>tx1</RequestId></Error>");
  EXPECT_EQ(e.code, "NoSuchKey");
  EXPECT_EQ(e.message, "gone & lost");
  EXPECT_EQ(e.request_id, "tx1");
  EXPECT_TRUE(ParseS3Error("<html>proxy error</html>").code.empty());
}

// Property: whatever a listing holds, every name it yields is one
// component of the directory asked for, and every key it yields for a
// removal lies under the prefix; a key or common prefix outside it is
// refused, naming it with control characters escaped.
TEST(S3Listing, ForeignKeysAreRefusedAndEveryAcceptedNameIsUnderThePrefix) {
  const std::string prefix = "team/job/";
  const std::vector<std::string> pool = {"team/job/LATEST",
                                         "team/job/step-0000000001/MANIFEST",
                                         "team/job/step-0000000001/rank-000000.ckd",
                                         "team/job/",
                                         "team/jobX/step-0000000001/MANIFEST",
                                         "team/jo",
                                         "other-team/model.bin",
                                         "team/job/../escape",
                                         "team/job//double",
                                         "team/job/./dot",
                                         std::string("team/job/nul\0name", 18),
                                         "team/job/\x1b[31mred"};
  std::mt19937 rng(7);
  int refused = 0, accepted = 0;
  for (int round = 0; round < 2000; ++round) {
    S3ListPage page;
    const int n = static_cast<int>(rng() % 5);
    for (int i = 0; i < n; ++i) {
      const std::string& k = pool[rng() % pool.size()];
      if (rng() % 3 == 0) {
        page.prefixes.push_back(k.back() == '/' ? k : k + "/");
      } else {
        page.objects.push_back(S3ListedObject{k, 1});
      }
    }
    bool foreign = false;
    for (const auto& o : page.objects) foreign = foreign || o.key.rfind(prefix, 0) != 0;
    std::vector<std::string> keys;
    absl::Status under = AddKeysUnder(page, prefix, "list", &keys);
    EXPECT_EQ(under.ok(), !foreign);
    for (const std::string& k : keys) EXPECT_EQ(k.rfind(prefix, 0), 0u) << k;
    std::map<std::string, bool> entries;
    absl::Status dir = AddDirectoryEntries(page, prefix, "list", &entries);
    if (!dir.ok()) {
      ++refused;
      EXPECT_TRUE(absl::IsDataLoss(dir)) << dir;
      EXPECT_EQ(std::string(dir.message()).find('\x1b'), std::string::npos) << "an escape reached a message";
      EXPECT_EQ(std::string(dir.message()).find('\0'), std::string::npos) << "a NUL reached a message";
      continue;
    }
    ++accepted;
    for (const auto& [name, is_dir] : entries) {
      EXPECT_FALSE(name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) << name;
    }
  }
  EXPECT_GT(refused, 100);
  EXPECT_GT(accepted, 100);
}

TEST(S3Ini, ReadsProfilesAndNamesTheBadLine) {
  auto ini = ParseIniFile(
      "# comment\n[default]\naws_access_key_id = AK\nAWS_SECRET_ACCESS_KEY=SK \n\n"
      "[profile train]\naws_access_key_id=AK2\n; more\naws_secret_access_key = S=K2\n");
  ASSERT_OK(ini);
  EXPECT_EQ((*ini)["default"]["aws_access_key_id"], "AK");
  EXPECT_EQ((*ini)["default"]["aws_secret_access_key"], "SK");
  EXPECT_EQ((*ini)["train"]["aws_secret_access_key"], "S=K2");
  auto bad = ParseIniFile("[default]\nkey value\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 2"), absl::string_view::npos) << bad.status();
  EXPECT_FALSE(ParseIniFile("k=v\n").ok());
  EXPECT_FALSE(ParseIniFile("[open\n").ok());
}

TEST(S3Uri, OptionsAndCredentialsAreCheckedBeforeAnyRequest) {
  TempDir dir;
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  unsetenv("AWS_PROFILE");
  setenv("AWS_SHARED_CREDENTIALS_FILE", dir.Join("none").c_str(), 1);
  auto no_creds = OpenStorage("s3://bucket/p?endpoint=http://127.0.0.1:1");
  ASSERT_FALSE(no_creds.ok());
  EXPECT_NE(no_creds.status().message().find("no credentials"), absl::string_view::npos) << no_creds.status();
  EXPECT_NE(no_creds.status().message().find("AWS_ACCESS_KEY_ID"), absl::string_view::npos) << no_creds.status();

  WriteFile(dir.Join("creds"), "[other]\naws_access_key_id=A\naws_secret_access_key=SECRETVALUE\n");
  setenv("AWS_SHARED_CREDENTIALS_FILE", dir.Join("creds").c_str(), 1);
  auto no_profile = OpenStorage("s3://bucket/p?endpoint=http://127.0.0.1:1&profile=missing");
  ASSERT_FALSE(no_profile.ok());
  EXPECT_NE(no_profile.status().message().find("no profile [missing]"), absl::string_view::npos) << no_profile.status();
  // The profile's credentials are found; nothing listens on port 1, so the
  // open fails at its probe, without showing the secret.
  auto unreachable = OpenStorage("s3://bucket/p?endpoint=http://127.0.0.1:1&profile=other&deadline=0.2");
  ASSERT_FALSE(unreachable.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(unreachable.status())) << unreachable.status();
  EXPECT_EQ(unreachable.status().message().find("SECRETVALUE"), absl::string_view::npos);

  setenv("AWS_ACCESS_KEY_ID", "A", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "S", 1);
  for (const std::string bad :
       {"s3://", "s3://ab/p", "s3://Upper/p", "s3://bucket/p?colour=red", "s3://bucket/p?endpoint=ftp://h",
        "s3://bucket/p?endpoint=http://h/path", "s3://bucket/p?part_size=1M", "s3://bucket/p?connections=0",
        "s3://bucket/p?addressing=sideways", "s3://bucket/p?deadline=0"}) {
    auto s = OpenStorage(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << bad << ": " << s.status();
  }
  unsetenv("AWS_SECRET_ACCESS_KEY");
  auto half = OpenStorage("s3://bucket/p");
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.status().message().find("set together"), absl::string_view::npos) << half.status();
}

}  // namespace
}  // namespace ckpt::testing
