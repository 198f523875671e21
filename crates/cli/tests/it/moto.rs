//! moto's S3 server on loopback for the end-to-end tests of declared inputs and outputs (from
//! PyPI; `scripts/test.sh` installs it), and boto3 to put and read objects beside Gantry.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::harness::eventually;

/// moto's S3 server on a free loopback port, stopped when dropped.
pub struct Moto {
    child: Child,
    /// Its endpoint, `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// Starts moto, or says why not: `None` skips (locally) unless `GANTRY_REQUIRE_S3_TESTS` is set
/// (`scripts/test.sh` sets it once moto is installed).
pub fn moto() -> Option<Moto> {
    let have =
        Command::new("python3").args(["-c", "import moto.server, boto3"]).status().is_ok_and(|s| s.success());
    if !have {
        assert!(std::env::var_os("GANTRY_REQUIRE_S3_TESTS").is_none(), "moto is required but not installed");
        eprintln!("SKIPPED: moto[server] is not installed (pip install 'moto[server]')");
        return None;
    }
    let port = free_port();
    let child = Command::new("python3")
        .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start moto");
    let url = format!("http://127.0.0.1:{port}");
    let moto = Moto { child, url };
    eventually(Duration::from_secs(30), "moto answers", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok().map(|_| ())
    });
    Some(moto)
}

/// Puts `bytes` random bytes at `s3://bucket/key` on moto; returns their hex SHA-256.
pub fn put_object(moto: &Moto, bucket: &str, key: &str, bytes: usize) -> String {
    let script = format!(
        "import boto3, hashlib, os\n\
         s3 = boto3.client('s3', endpoint_url='{url}', aws_access_key_id='test', aws_secret_access_key='test', region_name='us-east-1')\n\
         s3.create_bucket(Bucket='{bucket}')\n\
         data = os.urandom({bytes})\n\
         s3.put_object(Bucket='{bucket}', Key='{key}', Body=data)\n\
         print(hashlib.sha256(data).hexdigest())\n",
        url = moto.url
    );
    let out = Command::new("python3").args(["-c", &script]).output().expect("python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Runs a Python script with `s3`, a boto3 client of moto, defined; its stdout.
fn boto(moto: &Moto, body: &str) -> String {
    let script = format!(
        "import boto3, json\n\
         s3 = boto3.client('s3', endpoint_url='{url}', aws_access_key_id='test', aws_secret_access_key='test', region_name='us-east-1')\n\
         {body}\n",
        url = moto.url
    );
    let out = Command::new("python3").args(["-c", &script]).output().expect("python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Makes the bucket `bucket` on moto.
pub fn create_bucket(moto: &Moto, bucket: &str) {
    boto(moto, &format!("s3.create_bucket(Bucket='{bucket}')"));
}

/// Every object of `bucket` under `prefix`: key and bytes (as text, lossily).
pub fn objects(moto: &Moto, bucket: &str, prefix: &str) -> BTreeMap<String, String> {
    let out = boto(
        moto,
        &format!(
            "keys = [o['Key'] for o in s3.list_objects_v2(Bucket='{bucket}', Prefix='{prefix}').get('Contents', [])]\n\
             print(json.dumps({{k: s3.get_object(Bucket='{bucket}', Key=k)['Body'].read().decode('utf-8', 'replace') for k in keys}}))"
        ),
    );
    serde_json::from_str(&out).expect("objects json")
}
