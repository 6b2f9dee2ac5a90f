//! Transaction markers as kaas writes them decode as Kafka control records with another
//! implementation's decoder (the kafka-protocol crate's), so clients will read them as such.

use kaas_core::partition::log::control::{Marker, marker_batch};
use kafka_protocol::records::RecordBatchDecoder;

#[test]
fn markers_decode_as_control_records_elsewhere() {
    for (marker, kind) in [(Marker::Commit, 1u8), (Marker::Abort, 0u8)] {
        let mut raw = marker_batch(42 << 40, 5, marker, 9, 1_767_225_600_000);
        let set = RecordBatchDecoder::decode(&mut raw).expect("decodes");
        assert_eq!(set.records.len(), 1);
        let record = &set.records[0];
        assert!(record.control && record.transactional);
        assert_eq!((record.producer_id, record.producer_epoch), (42 << 40, 5));
        assert_eq!(record.key.as_deref(), Some(&[0, 0, 0, kind][..]));
        assert_eq!(record.value.as_deref(), Some(&[0, 0, 0, 0, 0, 9][..]));
    }
}
