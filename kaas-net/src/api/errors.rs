//! The error codes an answer carries, for the operators' error counts
//! (`kaas_request_errors_total`): every code in it, the top-level one and each topic's,
//! partition's or item's, as Apache's `errorCounts()` gathers them for its ErrorsPerSec. Every
//! response kaas encodes is in the table below, so a new API cannot be left uncounted.

use kafka_protocol::messages::*;

/// A response whose error codes can be read.
pub trait ErrorCodes {
    fn error_codes(&self, codes: &mut Codes);
}

/// The error codes gathered from an answer: 0 (no error) is not kept, so an answer without an
/// error allocates nothing on the way to the client.
#[derive(Debug, Default)]
pub struct Codes(Vec<i16>);

impl Codes {
    pub fn push(&mut self, code: i16) {
        if code != 0 {
            self.0.push(code);
        }
    }

    pub fn extend(&mut self, codes: impl IntoIterator<Item = i16>) {
        codes.into_iter().for_each(|code| self.push(code));
    }
}

/// The error codes of `response`, 0s left out.
pub fn of<T: ErrorCodes>(response: &T) -> Vec<i16> {
    let mut codes = Codes::default();
    response.error_codes(&mut codes);
    codes.0
}

macro_rules! error_codes {
    ($($response:ty => |$r:ident, $c:ident| $body:block)*) => {
        $(impl ErrorCodes for $response {
            fn error_codes(&self, $c: &mut Codes) {
                let $r = self;
                $body
            }
        })*
    };
}

error_codes! {
    ApiVersionsResponse => |r, c| { c.push(r.error_code) }
    MetadataResponse => |r, c| {
        for t in &r.topics {
            c.push(t.error_code);
            c.extend(t.partitions.iter().map(|p| p.error_code));
        }
    }
    ProduceResponse => |r, c| {
        for t in &r.responses {
            c.extend(t.partition_responses.iter().map(|p| p.error_code));
        }
    }
    FetchResponse => |r, c| {
        c.push(r.error_code);
        for t in &r.responses {
            c.extend(t.partitions.iter().map(|p| p.error_code));
        }
    }
    ListOffsetsResponse => |r, c| {
        for t in &r.topics {
            c.extend(t.partitions.iter().map(|p| p.error_code));
        }
    }
    OffsetForLeaderEpochResponse => |r, c| {
        for t in &r.topics {
            c.extend(t.partitions.iter().map(|p| p.error_code));
        }
    }
    FindCoordinatorResponse => |r, c| {
        c.push(r.error_code);
        c.extend(r.coordinators.iter().map(|k| k.error_code));
    }
    CreateTopicsResponse => |r, c| { c.extend(r.topics.iter().map(|t| t.error_code)) }
    DeleteTopicsResponse => |r, c| { c.extend(r.responses.iter().map(|t| t.error_code)) }
    CreatePartitionsResponse => |r, c| { c.extend(r.results.iter().map(|t| t.error_code)) }
    DeleteRecordsResponse => |r, c| {
        for t in &r.topics {
            c.extend(t.partitions.iter().map(|p| p.error_code));
        }
    }
    DescribeClusterResponse => |r, c| { c.push(r.error_code) }
    DescribeQuorumResponse => |r, c| {
        c.push(r.error_code);
        for t in &r.topics {
            c.extend(t.partitions.iter().map(|p| p.error_code));
        }
    }
    DescribeTopicPartitionsResponse => |r, c| { c.extend(r.topics.iter().map(|t| t.error_code)) }
    ListConfigResourcesResponse => |r, c| { c.push(r.error_code) }
    DescribeAclsResponse => |r, c| { c.push(r.error_code) }
    CreateAclsResponse => |r, c| { c.extend(r.results.iter().map(|x| x.error_code)) }
    DeleteAclsResponse => |r, c| {
        for f in &r.filter_results {
            c.push(f.error_code);
            c.extend(f.matching_acls.iter().map(|m| m.error_code));
        }
    }
    DescribeUserScramCredentialsResponse => |r, c| {
        c.push(r.error_code);
        c.extend(r.results.iter().map(|x| x.error_code));
    }
    AlterUserScramCredentialsResponse => |r, c| { c.extend(r.results.iter().map(|x| x.error_code)) }
    DescribeLogDirsResponse => |r, c| {
        c.push(r.error_code);
        c.extend(r.results.iter().map(|x| x.error_code));
    }
    AlterReplicaLogDirsResponse => |r, c| {
        for t in &r.results {
            c.extend(t.partitions.iter().map(|p| p.error_code));
        }
    }
    ElectLeadersResponse => |r, c| {
        c.push(r.error_code);
        for t in &r.replica_election_results {
            c.extend(t.partition_result.iter().map(|p| p.error_code));
        }
    }
    AlterPartitionReassignmentsResponse => |r, c| {
        c.push(r.error_code);
        for t in &r.responses {
            c.extend(t.partitions.iter().map(|p| p.error_code));
        }
    }
    ListPartitionReassignmentsResponse => |r, c| { c.push(r.error_code) }
    DescribeConfigsResponse => |r, c| { c.extend(r.results.iter().map(|x| x.error_code)) }
    IncrementalAlterConfigsResponse => |r, c| { c.extend(r.responses.iter().map(|x| x.error_code)) }
    AlterConfigsResponse => |r, c| { c.extend(r.responses.iter().map(|x| x.error_code)) }
    JoinGroupResponse => |r, c| { c.push(r.error_code) }
    SyncGroupResponse => |r, c| { c.push(r.error_code) }
    HeartbeatResponse => |r, c| { c.push(r.error_code) }
    LeaveGroupResponse => |r, c| {
        c.push(r.error_code);
        c.extend(r.members.iter().map(|m| m.error_code));
    }
    DescribeGroupsResponse => |r, c| { c.extend(r.groups.iter().map(|g| g.error_code)) }
    ListGroupsResponse => |r, c| { c.push(r.error_code) }
    ConsumerGroupHeartbeatResponse => |r, c| { c.push(r.error_code) }
    ConsumerGroupDescribeResponse => |r, c| { c.extend(r.groups.iter().map(|g| g.error_code)) }
    ShareGroupHeartbeatResponse => |r, c| { c.push(r.error_code) }
    ShareGroupDescribeResponse => |r, c| { c.extend(r.groups.iter().map(|g| g.error_code)) }
    ShareFetchResponse => |r, c| {
        c.push(r.error_code);
        for t in &r.responses {
            for p in &t.partitions {
                c.extend([p.error_code, p.acknowledge_error_code]);
            }
        }
    }
    ShareAcknowledgeResponse => |r, c| {
        c.push(r.error_code);
        for t in &r.responses {
            c.extend(t.partitions.iter().map(|p| p.error_code));
        }
    }
    TxnShareAcknowledgeResponse => |r, c| {
        c.push(r.error_code);
        for t in &r.responses {
            c.extend(t.partitions.iter().map(|p| p.error_code));
        }
    }
    DescribeShareGroupOffsetsResponse => |r, c| {
        for g in &r.groups {
            c.push(g.error_code);
            for t in &g.topics {
                c.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
    }
    AlterShareGroupOffsetsResponse => |r, c| {
        c.push(r.error_code);
        for t in &r.responses {
            c.extend(t.partitions.iter().map(|p| p.error_code));
        }
    }
    DeleteShareGroupOffsetsResponse => |r, c| {
        c.push(r.error_code);
        c.extend(r.responses.iter().map(|t| t.error_code));
    }
    DeleteGroupsResponse => |r, c| { c.extend(r.results.iter().map(|g| g.error_code)) }
    OffsetDeleteResponse => |r, c| {
        c.push(r.error_code);
        for t in &r.topics {
            c.extend(t.partitions.iter().map(|p| p.error_code));
        }
    }
    OffsetCommitResponse => |r, c| {
        for t in &r.topics {
            c.extend(t.partitions.iter().map(|p| p.error_code));
        }
    }
    OffsetFetchResponse => |r, c| {
        c.push(r.error_code);
        for t in &r.topics {
            c.extend(t.partitions.iter().map(|p| p.error_code));
        }
        for g in &r.groups {
            c.push(g.error_code);
            for t in &g.topics {
                c.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
    }
    InitProducerIdResponse => |r, c| { c.push(r.error_code) }
    DescribeProducersResponse => |r, c| {
        for t in &r.topics {
            c.extend(t.partitions.iter().map(|p| p.error_code));
        }
    }
    AddPartitionsToTxnResponse => |r, c| {
        c.push(r.error_code);
        for x in &r.results_by_transaction {
            for t in &x.topic_results {
                c.extend(t.results_by_partition.iter().map(|p| p.partition_error_code));
            }
        }
        for t in &r.results_by_topic_v3_and_below {
            c.extend(t.results_by_partition.iter().map(|p| p.partition_error_code));
        }
    }
    AddOffsetsToTxnResponse => |r, c| { c.push(r.error_code) }
    EndTxnResponse => |r, c| { c.push(r.error_code) }
    WriteTxnMarkersResponse => |r, c| {
        for m in &r.markers {
            for t in &m.topics {
                c.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
    }
    TxnOffsetCommitResponse => |r, c| {
        for t in &r.topics {
            c.extend(t.partitions.iter().map(|p| p.error_code));
        }
    }
    ListTransactionsResponse => |r, c| { c.push(r.error_code) }
    DescribeTransactionsResponse => |r, c| { c.extend(r.transaction_states.iter().map(|s| s.error_code)) }
    DescribeClientQuotasResponse => |r, c| { c.push(r.error_code) }
    AlterClientQuotasResponse => |r, c| { c.extend(r.entries.iter().map(|e| e.error_code)) }
    SaslHandshakeResponse => |r, c| { c.push(r.error_code) }
    SaslAuthenticateResponse => |r, c| { c.push(r.error_code) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};

    #[test]
    fn every_partition_code_is_read() {
        let response =
            ProduceResponse::default().with_responses(vec![TopicProduceResponse::default().with_partition_responses(
                vec![PartitionProduceResponse::default().with_error_code(6), PartitionProduceResponse::default()],
            )]);
        assert_eq!(of(&response), vec![6]);
        assert_eq!(of(&EndTxnResponse::default().with_error_code(47)), vec![47]);
    }
}
