-- create _sluice_loads
CREATE TABLE IF NOT EXISTS `db`.`_sluice_loads` ON CLUSTER `c` (
	load_id String, pipeline String, flow String, targets String, positions String,
	rows Int64, dead_letters Int64, generation Int64, committed_at DateTime64(6, 'UTC'),
	from_positions String, slot String, committed_us UInt32, `replaced` String,
	`schema_version_hash` String
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/all-c/{database}/{table}', '{shard}-{replica}') ORDER BY (pipeline, flow, slot, committed_at, load_id);

-- create _sluice_dead_letters
CREATE TABLE IF NOT EXISTS `db`.`_sluice_dead_letters` ON CLUSTER `c` (
	`pipeline` String,
	`flow` String,
	`target` String,
	`source` String,
	`position` String,
	`reason` String,
	`error` String,
	`payload` Nullable(String),
	`at` DateTime64(6, 'UTC'),
	`_sluice_load_id` String,
	`_sluice_comments` String ALIAS 'payload=sluice:bytes'
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/all-c/{database}/{table}', '{shard}-{replica}') PARTITION BY toYYYYMM(at) ORDER BY (`pipeline`, `flow`, `at`);

-- create _sluice_expectations
CREATE TABLE IF NOT EXISTS `db`.`_sluice_expectations` ON CLUSTER `c` (
	`pipeline` String,
	`flow` String,
	`target` String,
	`expectation` String,
	`action` String,
	`rows` Int64,
	`at` DateTime64(6, 'UTC'),
	`_sluice_load_id` String
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/all-c/{database}/{table}', '{shard}-{replica}') PARTITION BY toYYYYMM(at) ORDER BY (`pipeline`, `flow`, `at`);

-- create _sluice_dead_letters_replayed
CREATE TABLE IF NOT EXISTS `db`.`_sluice_dead_letters_replayed` ON CLUSTER `c` (
	`pipeline` String,
	`flow` String,
	`target` String,
	`source` String,
	`position` String,
	`dead_letter_load_id` String,
	`outcome` String,
	`at` DateTime64(6, 'UTC'),
	`_sluice_load_id` String
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/all-c/{database}/{table}', '{shard}-{replica}') PARTITION BY toYYYYMM(at) ORDER BY (`pipeline`, `flow`, `at`);

-- create _sluice_version
CREATE TABLE IF NOT EXISTS `db`.`_sluice_version` ON CLUSTER `c` (
	`pipeline` String,
	`version` Int64,
	`version_hash` String,
	`schema` String,
	`flow` String,
	`inserted_at` DateTime64(6, 'UTC'),
	`_sluice_load_id` String
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/all-c/{database}/{table}', '{shard}-{replica}') ORDER BY (`pipeline`, `version`);

-- create _sluice_state
CREATE TABLE IF NOT EXISTS `db`.`_sluice_state` ON CLUSTER `c` (
	key String, value String, revision UInt64, updated_at DateTime('UTC')
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/all-c/{database}/{table}', '{shard}-{replica}', revision) ORDER BY key;

-- create _sluice_heartbeats
CREATE TABLE IF NOT EXISTS `db`.`_sluice_heartbeats` ON CLUSTER `c` (
	pipeline String, id String, kind String, host String, pid Int64,
	beat_at DateTime('UTC'), expires DateTime('UTC'), ended UInt8, version UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/all-c/{database}/{table}', '{shard}-{replica}', version) ORDER BY (pipeline, id);

-- create _sluice_cdc_state
CREATE TABLE IF NOT EXISTS `db`.`_sluice_cdc_state` ON CLUSTER `c` (
	target String, key String, value String, deleted UInt8, version UInt64, `_sluice_load_id` String
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/all-c/{database}/{table}', '{shard}-{replica}', version, deleted) PARTITION BY target ORDER BY (target, key);

-- create _sluice_resets
CREATE TABLE IF NOT EXISTS `db`.`_sluice_resets` ON CLUSTER `c` (
	reset_id String, pipeline String, kind String, flows String, tables String,
	at DateTime64(6, 'UTC'), at_us UInt32
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/all-c/{database}/{table}', '{shard}-{replica}') ORDER BY (pipeline, reset_id, kind);

-- create _sluice_leases
CREATE TABLE IF NOT EXISTS `db`.`_sluice_leases` ON CLUSTER `c` (
	target String, holder String, expires DateTime('UTC'), version UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/all-c/{database}/{table}', '{shard}-{replica}', version) ORDER BY target;

-- create _sluice_heads
CREATE TABLE IF NOT EXISTS `db`.`_sluice_heads` ON CLUSTER `c` (
	pipeline String, flow String, slot String, position String,
	loads Int64, rows Int64, dead_letters Int64, version UInt64, load_id String
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/all-c/{database}/{table}', '{shard}-{replica}', version) ORDER BY (pipeline, flow, slot);

-- create table t
CREATE TABLE IF NOT EXISTS `db`.`t` ON CLUSTER `c` (
	`id` Int64,
	`day` Date32,
	`at` Nullable(DateTime64(6, 'UTC')),
	`raw` String,
	`tags` Array(DateTime64(6, 'UTC')),
	`_sluice_load_id` String,
	`_sluice_comments` String ALIAS 'raw=sluice:bytes'
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}') PARTITION BY `day` ORDER BY `id`;

-- create table _sluice_phys_cust
CREATE TABLE IF NOT EXISTS `db`.`_sluice_phys_cust` ON CLUSTER `c` (
	`id` Int64,
	`name` Nullable(String),
	`_sluice_key` String,
	`_sluice_seq` String,
	`_sluice_deleted` UInt8,
	`_sluice_version` UInt64,
	`_sluice_load_id` String,
	`_sluice_comments` String ALIAS '_sluice_key=sluice:keys=id'
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}', `_sluice_version`, `_sluice_deleted`) ORDER BY (`id`, `_sluice_key`);

-- create view cust
CREATE VIEW IF NOT EXISTS `db`.`cust` ON CLUSTER `c` AS SELECT `id`, `name` FROM `db`.`_sluice_phys_cust` FINAL WHERE `_sluice_deleted` = 0;

-- create table _sluice_phys_hist
CREATE TABLE IF NOT EXISTS `db`.`_sluice_phys_hist` ON CLUSTER `c` (
	`id` Int64,
	`name` Nullable(String),
	`__START_AT` Int64,
	`__END_AT` Nullable(Int64),
	`_sluice_key` String,
	`_sluice_seq` String,
	`_sluice_deleted` UInt8,
	`_sluice_version` UInt64,
	`_sluice_load_id` String,
	`_sluice_comments` String ALIAS '_sluice_key=sluice:keys=id'
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}', `_sluice_version`, `_sluice_deleted`) ORDER BY (`id`, `_sluice_key`, `_sluice_seq`);

-- create view hist
CREATE VIEW IF NOT EXISTS `db`.`hist` ON CLUSTER `c` AS SELECT `id`, `name` FROM `db`.`_sluice_phys_hist` FINAL WHERE `_sluice_deleted` = 0;

