"""The contract names of what git-lanes stores and prints (SPEC §4, §5, §15, §16). Cheap to import."""

BATCH_RECORD = "git_lanes/batch_record/v1"
LANE_RECORD = "git_lanes/lane_record/v1"
BATCH_REPORT = "git_lanes/batch_report/v1"
STORE_LAYOUT = "git_lanes/store_layout/v2"
RECEIPT = "git_lanes/receipt/v1"
CONTRACTS = "git_lanes/contracts/v1"
