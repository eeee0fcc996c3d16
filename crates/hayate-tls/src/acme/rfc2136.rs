//! DNS messages for DNS-01: RFC 2136 dynamic updates signed with TSIG
//! (RFC 8945), the SOA query that finds a name's zone, and the TXT query
//! that sees whether a record is there. hickory-proto builds, signs and
//! parses them; they go over TCP (RFC 7766), one exchange per connection:
//! a few messages per order, and no retransmission or truncation to
//! handle as over UDP.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use hayate_config::values::TsigKey;
use hickory_proto::dnssec::rdata::tsig::TsigAlgorithm;
use hickory_proto::dnssec::rdata::DNSSECRData;
use hickory_proto::dnssec::tsig::TSigner;
use hickory_proto::op::{update_message, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::TXT;
use hickory_proto::rr::{Name, RData, Record, RecordSet, RecordType};
use hickory_proto::serialize::binary::BinEncodable;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::dns01::{Dns01Error, Dns01Outcome};

/// Longest wait for one DNS exchange (connect, ask, answer): a server on
/// another continent answers in well under a second.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(5);
/// TTL of the TXT record: short, so a resolver does not keep an old
/// challenge value long (the CA asks the authoritative servers anyway).
const RECORD_TTL: u32 = 60;
/// Allowed clock difference with the server for TSIG (RFC 8945 §5.2.3's
/// recommended 300 s).
const TSIG_FUDGE: u16 = 300;

/// The signer for a TSIG key given in the config.
pub(super) fn signer(key: &TsigKey) -> Result<TSigner, String> {
    let TsigKey::Inline {
        name,
        algorithm,
        secret,
    } = key
    else {
        return Err("the TSIG key file was not read".into());
    };
    let algorithm = TsigAlgorithm::from_name(
        Name::from_ascii(algorithm).map_err(|e| format!("TSIG algorithm: {e}"))?,
    );
    let name = Name::from_ascii(name).map_err(|e| format!("TSIG key name: {e}"))?;
    TSigner::new(secret.clone(), algorithm, name, TSIG_FUDGE).map_err(|e| e.to_string())
}

/// The zone `fqdn` is in, as `server` says: the owner of the SOA in its
/// answer (`fqdn` is the zone's apex) or in its authority section (the
/// name is below it, or does not exist yet).
pub(super) async fn zone_of(server: SocketAddr, fqdn: &Name) -> Result<Name, Dns01Error> {
    let answer = exchange(server, query(fqdn, RecordType::SOA), None).await?;
    let soa = answer.answers().iter().chain(answer.name_servers());
    soa.filter(|r| r.record_type() == RecordType::SOA)
        .map(|r| r.name().clone())
        .find(|zone| zone.zone_of(fqdn))
        .ok_or_else(|| {
            Dns01Error::new(
                Dns01Outcome::Refused,
                format!("{server} gave no SOA for {fqdn}: it is not authoritative for the name's zone (set acme_dns_zone?)"),
            )
        })
}

/// Adds (`add`) or removes the TXT record `fqdn` = `value` in `zone` at
/// `server`, signed with `key` when given.
pub(super) async fn update(
    server: SocketAddr,
    zone: &Name,
    fqdn: &Name,
    value: &str,
    key: Option<&TSigner>,
    add: bool,
) -> Result<(), Dns01Error> {
    if !zone.zone_of(fqdn) {
        return Err(Dns01Error::new(
            Dns01Outcome::Refused,
            format!("{fqdn} is not in the zone {zone}"),
        ));
    }
    let txt = RData::TXT(TXT::new(vec![value.to_string()]));
    let rrset = RecordSet::from(Record::from_rdata(fqdn.clone(), RECORD_TTL, txt));
    let message = if add {
        update_message::append(rrset, zone.clone(), false, false)
    } else {
        update_message::delete_by_rdata(rrset, zone.clone(), false)
    };
    exchange(server, message, key).await.map(drop)
}

/// The TXT values of `fqdn` at `server` (non-recursive: the server's own
/// data).
pub(super) async fn txt_values(server: SocketAddr, fqdn: &Name) -> Result<Vec<String>, Dns01Error> {
    let mut message = query(fqdn, RecordType::TXT);
    message.set_recursion_desired(false);
    let answer = match exchange(server, message, None).await {
        Ok(a) => a,
        Err(e) if e.outcome == Dns01Outcome::Refused => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let values = answer.answers().iter().filter_map(|r| match r.data() {
        RData::TXT(txt) => Some(
            txt.txt_data()
                .iter()
                .map(|part| String::from_utf8_lossy(part))
                .collect::<String>(),
        ),
        _ => None,
    });
    Ok(values.collect())
}

fn query(name: &Name, kind: RecordType) -> Message {
    let mut message = Message::new();
    message
        .set_id(rand_id())
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true);
    message.add_query(Query::query(name.clone(), kind));
    message
}

/// A message id: the low bits of the clock's nanoseconds (TCP: ids only
/// match an answer to its question on one connection).
fn rand_id() -> u16 {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (nanos ^ (nanos >> 16)) as u16
}

/// Sends `message` to `server` over TCP, signed with `key` when given, and
/// returns the answer; an answer other than NOERROR is an error naming its
/// code (with the TSIG error for NOTAUTH: BADKEY, BADSIG, BADTIME).
async fn exchange(
    server: SocketAddr,
    mut message: Message,
    key: Option<&TSigner>,
) -> Result<Message, Dns01Error> {
    let internal = |e: String| Dns01Error::new(Dns01Outcome::Refused, e);
    let verifier = match key {
        Some(signer) => {
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as u32);
            message
                .finalize(signer, now)
                .map_err(|e| internal(format!("signing: {e}")))?
        }
        None => None,
    };
    let bytes = message
        .to_vec()
        .map_err(|e| internal(format!("encoding: {e}")))?;
    let unreachable = |e: String| {
        Dns01Error::new(
            Dns01Outcome::Unreachable,
            format!("DNS server {server}: {e}"),
        )
    };
    let answer = tokio::time::timeout(EXCHANGE_TIMEOUT, async {
        let mut stream = tokio::net::TcpStream::connect(server).await?;
        let len = u16::try_from(bytes.len()).map_err(std::io::Error::other)?;
        stream.write_all(&len.to_be_bytes()).await?;
        stream.write_all(&bytes).await?;
        let len = stream.read_u16().await?;
        let mut answer = vec![0; usize::from(len)];
        stream.read_exact(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    })
    .await
    .map_err(|_| unreachable(format!("no answer in {}s", EXCHANGE_TIMEOUT.as_secs())))?
    .map_err(|e| unreachable(e.to_string()))?;
    let parsed = Message::from_vec(&answer)
        .map_err(|e| unreachable(format!("an answer that does not parse: {e}")))?;
    if parsed.id() != message.id() {
        return Err(unreachable("an answer to another question".into()));
    }
    let code = parsed.response_code();
    if code != ResponseCode::NoError {
        let tsig = tsig_error(&parsed)
            .map(|e| {
                format!(
                    " (TSIG {e}: the server does not accept the key {}; check acme_dns_tsig_key)",
                    key.map_or("-".into(), |k| k
                        .signer_name()
                        .to_string()
                        .trim_end_matches('.')
                        .to_string())
                )
            })
            .unwrap_or_default();
        let op = if message.op_code() == OpCode::Update {
            "the update"
        } else {
            "the query"
        };
        return Err(Dns01Error::new(
            Dns01Outcome::Refused,
            format!("DNS server {server} refused {op}: {code}{tsig}"),
        ));
    }
    if let Some(mut verify) = verifier {
        verify(&answer).map_err(|e| {
            Dns01Error::new(
                Dns01Outcome::Refused,
                format!("the answer of DNS server {server} is not signed with the key: {e}"),
            )
        })?;
    }
    Ok(parsed)
}

/// The error field of an answer's TSIG record (RFC 8945 §4.2): `BADSIG`,
/// `BADKEY`, `BADTIME`, or its number. hickory-proto parses the field but
/// does not expose it: read from the record written out again, after the
/// algorithm name, time (6), fudge (2), MAC size (2), MAC and original id (2).
fn tsig_error(answer: &Message) -> Option<String> {
    let tsig = answer.signature().iter().find_map(|r| match r.data() {
        RData::DNSSEC(DNSSECRData::TSIG(t)) => Some(t),
        _ => None,
    })?;
    let bytes = RData::DNSSEC(DNSSECRData::TSIG(tsig.clone()))
        .to_bytes()
        .ok()?;
    let at = tsig.algorithm().to_name().to_bytes().ok()?.len() + 6 + 2 + 2 + tsig.mac().len() + 2;
    let code = u16::from_be_bytes([*bytes.get(at)?, *bytes.get(at + 1)?]);
    Some(match code {
        0 => return None,
        16 => "BADSIG".into(),
        17 => "BADKEY".into(),
        18 => "BADTIME".into(),
        n => format!("error {n}"),
    })
}
