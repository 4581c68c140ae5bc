# Durable across operations: pg_dump/restore and ALTER
# EXTENSION UPDATE.
#
# 1. Dump and restore.  idempotent_record and idempotency_token are
#    registered with pg_extension_config_dump, so a dump holds CREATE
#    EXTENSION and then the rows of both tables.  Restoring the whole dump
#    into a new database (pg_restore, or psql for a plain dump, also into a
#    database where the extension was already created: the dump says
#    CREATE EXTENSION IF NOT EXISTS) gives back every record and token
#    byte for byte, and claims replay there; so do the outbox's messages
#    and its fence sequence (no fence is issued twice).
# 2. Upgrade path.  For every version the extension can be installed at,
#    create it at that version, ALTER EXTENSION ... UPDATE to the default
#    version, and compare the extension's objects (pg_describe_object over
#    pg_depend) and their definitions with a fresh install; records made
#    at the old version replay after the update.  Records of every status,
#    made with the old version's objects (by this library, which serves
#    them until the update), and records as the 1.0 library left them
#    (an outcome moved expires_at to outcome time + ttl), are replayed,
#    taken over, reclaimed and purged after the update as their retention
#    says.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('dump_upgrade');
$node->init;
$node->append_conf('postgresql.conf', "log_statement = none\n");
$node->start;

# What must survive: finished, failed, leased (taken over once, with a
# recovery point), unknown; tokens unused and consumed; business rows.
my $fill = q{
CREATE TABLE orders (key text PRIMARY KEY, amount int);
BEGIN;
SELECT outcome FROM idem_claim('ord-1', scope => 'acct', fingerprint => idem_fingerprint('{"sku": 1}'));
INSERT INTO orders VALUES ('ord-1', 100);
SELECT idem_finish('ord-1', '{"order_id": 1, "note": "é 🔑"}', scope => 'acct');
SELECT outcome FROM idem_claim('ord-2', scope => 'acct');
SELECT idem_fail('ord-2', '{"error": "declined"}', retryable => false, scope => 'acct');
COMMIT;
SELECT outcome FROM idem_claim('pay-1', lease => '1 hour');
SELECT idem_checkpoint('pay-1', 'charged', fence => 1);
UPDATE idempotent_record SET locked_until = clock_timestamp() - interval '1 second' WHERE key = 'pay-1';
SELECT outcome FROM idem_claim('pay-1', lease => '1 hour');
SELECT outcome FROM idem_claim('pay-2', lease => '1 hour');
SELECT idem_mark_unknown('pay-2', '{"provider": "timeout"}', fence => 1);
};
my $fill_tokens = q{
CREATE TABLE tokens_issued (name text PRIMARY KEY, token text);
INSERT INTO tokens_issued VALUES ('unused', idem_token_issue('form', ttl => '1 hour')),
                                 ('consumed', idem_token_issue('form', ttl => '1 hour'));
SELECT idem_token_consume(token, 'form') FROM tokens_issued WHERE name = 'consumed';
};
my $has_tokens = 0;
# The outbox (1.3): a message sent under fence 1, one pending, one dead;
# the fence sequence is dumped too, so no fence is issued twice
my $fill_outbox = q{
SELECT idem_outbox_enqueue('orders', jsonb_build_object('n', n), '{"h": "é"}',
                           ('00000000-0000-4000-8000-00000000000' || n)::uuid, scope => 'acct')
  FROM generate_series(1, 3) AS n;
SELECT count(*) FROM idem_outbox_claim(2, '1 hour');
SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-000000000001}', 1);
SELECT idem_outbox_mark_failed('00000000-0000-4000-8000-000000000002', 1, 'no route', max_attempts => 1);
};
my $has_outbox = 0;
my $outbox_digest = q{
SELECT count(*) || ' ' || md5(string_agg(o::text, ',' ORDER BY message_id)) FROM idempotency_outbox o};

# More records for the upgrade path: a released key (retryable failure), a
# live lease, records whose retention ended (finished two days ago with a
# ttl of a day; a leased claim abandoned as long ago), and two records as
# the 1.0 library finished them (expires_at moved to outcome time + ttl):
# one finished late two hours ago, still kept, one whose retention ended
my $fill_more = q{
SELECT outcome FROM idem_claim('pay-3', lease => '1 hour');
SELECT idem_fail('pay-3', '{"error": "gateway"}', retryable => true, fence => 1);
SELECT outcome FROM idem_claim('pay-4', lease => '1 hour');
BEGIN;
SELECT outcome FROM idem_claim('old-1', ttl => '1 day');
SELECT idem_finish('old-1', '{"old": 1}');
COMMIT;
SELECT outcome FROM idem_claim('old-2', ttl => '1 day', lease => '1 minute');
UPDATE idempotent_record SET created_at = created_at - interval '2 days', updated_at = updated_at - interval '2 days',
                             expires_at = expires_at - interval '2 days', locked_until = locked_until - interval '2 days'
 WHERE key IN ('old-1', 'old-2');
INSERT INTO idempotent_record (key, status, result, fence, created_at, updated_at, expires_at) VALUES
    ('v10-late', 'succeeded', '{"late": true}', 1, now() - interval '3 days', now() - interval '2 hours',
     now() + interval '22 hours'),
    ('v10-gone', 'succeeded', '{"gone": true}', 1, now() - interval '3 days', now() - interval '2 days 1 hour',
     now() - interval '1 day 1 hour');
};

# What the update must leave of them, after the update
sub check_after_update
{
	my ($db, $what) = @_;
	is( $node->safe_psql($db, "SELECT outcome || ' ' || fence || ' ' || (result ->> 'error') FROM idem_claim('pay-3', lease => '1 minute')"),
		'claimed 2 gateway', "$what: a released key is taken over (fence 2, the error of the failed attempt)");
	is( $node->safe_psql($db, "SELECT outcome || ' ' || fence FROM idem_claim('pay-4')"),
		'in_progress 1', "$what: a live lease still holds its key");
	is( $node->safe_psql($db, "SELECT outcome || ' ' || (result ->> 'late') FROM idem_claim('v10-late')"),
		'replay true', "$what: a late outcome of the 1.0 library is kept for its ttl after it");
	is( $node->safe_psql($db, "SELECT string_agg(key, ' ' ORDER BY key) FROM idempotent_record WHERE key IN ('old-1', 'old-2', 'v10-gone', 'v10-late')"),
		'old-1 old-2 v10-gone v10-late', "$what: records past their retention are there before purge");
	is( $node->safe_psql($db, 'SELECT idem_purge(100)'), '3', "$what: purge deletes the three whose retention ended");
	is( $node->safe_psql($db, "SELECT string_agg(key, ' ' ORDER BY key) FROM idempotent_record WHERE key IN ('old-1', 'old-2', 'v10-gone', 'v10-late')"),
		'v10-late', "$what: ... and only them");
	is( $node->safe_psql($db, q{
			BEGIN;
			SELECT outcome || ' ' || fence FROM idem_claim('old-1');
			SELECT idem_finish('old-1', '{"again": 1}');
			COMMIT;
			SELECT outcome || ' ' || (result ->> 'again') FROM idem_claim('old-1');}),
		"claimed 1\n\nreplay 1", "$what: a purged key is claimed anew");
	# purge after the update, through the index the update made: bounded
	# batches of expired records, the live ones left
	$node->safe_psql($db, q{
		INSERT INTO idempotent_record (key, status, fence, created_at, updated_at, expires_at)
		SELECT 'bulk-' || i, 'succeeded', 1, now() - interval '2 days', now() - interval '2 days',
		       now() - interval '1 day' + CASE WHEN i % 2 = 0 THEN interval '2 days' ELSE interval '0' END
		  FROM generate_series(1, 500) AS i});
	is( $node->safe_psql($db, 'SELECT idem_purge(100); SELECT idem_purge(100); SELECT idem_purge(100);'),
		"100\n100\n50", "$what: purge deletes the 250 expired records of 500 in batches of at most 100");
	is( $node->safe_psql($db, "SELECT count(*) || ' ' || bool_and(expires_at > now()) FROM idempotent_record WHERE key LIKE 'bulk-%'"),
		'250 true', "$what: ... and leaves the 250 live ones");
}

# every column of every row, in a stable order
my $records_digest = q{
SELECT count(*) || ' ' || md5(string_agg(r::text, ',' ORDER BY scope, key)) FROM idempotent_record r};
my $tokens_digest = q{
SELECT count(*) || ' ' || coalesce(md5(string_agg(t::text, ',' ORDER BY scope, token)), '-') FROM idempotency_token t};

# Replays after a restore or an update, in database $db
sub check_replays
{
	my ($db, $what) = @_;
	is( $node->safe_psql($db,
			"SELECT outcome || ' ' || (result ->> 'order_id') || ' ' || (result ->> 'note') FROM idem_claim('ord-1', scope => 'acct', fingerprint => idem_fingerprint('{\"sku\": 1.0}'))"),
		'replay 1 é 🔑', "$what: a finished record replays");
	my ($rc, $out, $err) = $node->psql($db,
		"SELECT outcome FROM idem_claim('ord-1', scope => 'acct', fingerprint => idem_fingerprint('{\"sku\": 2}'))");
	like($err, qr/already used for a different request/, "$what: its fingerprint is still checked (IK001)");
	is( $node->safe_psql($db,
			"SELECT outcome || ' ' || status || ' ' || result FROM idem_claim('ord-2', scope => 'acct')"),
		'replay failed {"error": "declined"}', "$what: a final failure replays");
	is( $node->safe_psql($db, "SELECT outcome || ' ' || fence FROM idem_claim('pay-1')"),
		'in_progress 2', "$what: a leased claim is still held by its lease");
	is( $node->safe_psql($db, "SELECT outcome || ' ' || status FROM idem_claim('pay-2')"),
		'in_progress unknown', "$what: an unknown outcome still awaits reconciliation");
	$node->safe_psql($db,
		"UPDATE idempotent_record SET locked_until = clock_timestamp() - interval '1 second' WHERE key = 'pay-1'");
	is( $node->safe_psql($db,
			"SELECT outcome || ' ' || fence || ' ' || recovery_point FROM idem_claim('pay-1', lease => '1 minute')"),
		'claimed 3 charged', "$what: after its lease it is taken over with fence 3 and its recovery point");
	($rc, $out, $err) = $node->psql($db, "SELECT idem_finish('pay-1', '{}', fence => 2)");
	like($err, qr/stale fence/, "$what: the fence of before is stale (IK003)");
	is( $node->safe_psql($db, q{
			BEGIN;
			SELECT outcome FROM idem_claim('new-key');
			SELECT idem_finish('new-key', '{"new": true}');
			COMMIT;
			SELECT outcome FROM idem_claim('new-key');}),
		"claimed\n\nreplay", "$what: new claims work");
	if ($has_tokens)
	{
		is( $node->safe_psql($db, q{
				SELECT string_agg(name || '=' || idem_token_consume(token, 'form'), ' ' ORDER BY name)
				  FROM tokens_issued}),
			'consumed=false unused=true', "$what: a consumed token stays consumed, an unused one is consumed once");
	}
}

# The outbox after a restore: the pending message is claimed with a fence
# the source never issued, the sent and dead ones are not, fence 1 is stale
sub check_outbox
{
	my ($db, $what) = @_;
	is( $node->safe_psql($db, "SELECT message_id || ' ' || fence || ' ' || attempts FROM idem_outbox_claim(10, '1 hour')"),
		'00000000-0000-4000-8000-000000000003 2 1', "$what: the pending message is claimed, with fence 2");
	my ($rc, $out, $err) = $node->psql($db,
		"SELECT idem_outbox_mark_sent('{00000000-0000-4000-8000-000000000003}', 1)");
	like($err, qr/not held under fence 1/, "$what: fence 1 is stale there (IK003)");
	is( $node->safe_psql($db, "SELECT message_id || ' ' || last_error FROM idem_outbox_dead"),
		'00000000-0000-4000-8000-000000000002 no route', "$what: the dead message is listed");
}

###############################################################################
# 1. dump and restore
###############################################################################
$node->safe_psql('postgres', 'CREATE DATABASE src');
$node->safe_psql('src', 'CREATE EXTENSION idempotency');
$node->safe_psql('src', $fill);
$has_tokens = $node->safe_psql('src',
	"SELECT to_regclass('idempotency_token') IS NOT NULL") eq 't';
$node->safe_psql('src', $fill_tokens) if $has_tokens;
$has_outbox = $node->safe_psql('src',
	"SELECT to_regclass('idempotency_outbox') IS NOT NULL") eq 't';
$node->safe_psql('src', $fill_outbox) if $has_outbox;
my $records = $node->safe_psql('src', $records_digest);
my $tokens = $has_tokens ? $node->safe_psql('src', $tokens_digest) : '';
my $outbox = $has_outbox ? $node->safe_psql('src', $outbox_digest) : '';
like($records, qr/^4 /, 'the source database holds 4 records');

my $tmp = PostgreSQL::Test::Utils::tempdir;
$node->command_ok(
	[ 'pg_dump', '-Fc', '-f', "$tmp/src.dump", '-d', $node->connstr('src') ],
	'pg_dump -Fc of a database with records and tokens');
$node->command_ok(
	[ 'pg_dump', '-Fp', '-f', "$tmp/src.sql", '-d', $node->connstr('src') ],
	'pg_dump of the same database as plain SQL');
like(slurp_file("$tmp/src.sql"), qr/COPY public\.idempotent_record /,
	'the dump holds the rows of idempotent_record (pg_extension_config_dump)');

# a) pg_restore of the whole dump into an empty database
$node->safe_psql('postgres', 'CREATE DATABASE dst_restore');
$node->command_ok(
	[ 'pg_restore', '--exit-on-error', '-d', $node->connstr('dst_restore'), "$tmp/src.dump" ],
	'pg_restore into a new database');
# b) the plain dump into a database where the extension was created first
$node->safe_psql('postgres', 'CREATE DATABASE dst_psql');
$node->safe_psql('dst_psql', 'CREATE EXTENSION idempotency');
$node->command_ok(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-f', "$tmp/src.sql", '-d', $node->connstr('dst_psql') ],
	'the plain dump restores into a database that has the extension already');

for my $db ('dst_restore', 'dst_psql')
{
	is($node->safe_psql($db, $records_digest), $records, "$db: every record restored, byte for byte");
	is($node->safe_psql($db, $tokens_digest), $tokens, "$db: every token restored, byte for byte")
	  if $has_tokens;
	is($node->safe_psql($db, $outbox_digest), $outbox, "$db: every outbox message restored, byte for byte")
	  if $has_outbox;
	is($node->safe_psql($db, "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'"),
		$node->safe_psql('src', "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'"),
		"$db: the extension at the source's version");
	check_replays($db, $db);
	check_outbox($db, $db) if $has_outbox;
}

###############################################################################
# 2. upgrade path
###############################################################################

# The extension's objects and what defines them, one line each.
my $objects = q{
WITH ext AS (SELECT oid FROM pg_extension WHERE extname = 'idempotency'),
members AS (
    SELECT d.classid, d.objid, d.objsubid
      FROM pg_depend d, ext
     WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e')
SELECT pg_describe_object(m.classid, m.objid, m.objsubid) || ' | ' ||
       coalesce(CASE m.classid
         WHEN 'pg_proc'::regclass THEN
           (SELECT concat_ws(' ', pg_get_function_result(p.oid), p.prokind, p.provolatile,
                             p.proparallel, p.prosecdef, p.proisstrict, p.proconfig::text,
                             p.proacl::text, md5(p.prosrc), p.probin)
              FROM pg_proc p WHERE p.oid = m.objid)
         WHEN 'pg_class'::regclass THEN
           (SELECT concat_ws(' ', c.relkind, c.relacl::text, c.reloptions::text,
                             (SELECT string_agg(a.attname || ':' || format_type(a.atttypid, a.atttypmod)
                                                || ':' || a.attnotnull || ':' || coalesce(pg_get_expr(ad.adbin, ad.adrelid), '')
                                                || ':' || a.attcompression::text,
                                                ',' ORDER BY a.attnum)
                                FROM pg_attribute a
                                LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
                               WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
                             (SELECT string_agg(pg_get_constraintdef(co.oid), ',' ORDER BY co.conname)
                                FROM pg_constraint co WHERE co.conrelid = c.oid),
                             (SELECT string_agg(pg_get_indexdef(i.indexrelid), ',' ORDER BY i.indexrelid::regclass::text)
                                FROM pg_index i WHERE i.indrelid = c.oid),
                             CASE WHEN c.relkind = 'v' THEN md5(pg_get_viewdef(c.oid)) END)
              FROM pg_class c WHERE c.oid = m.objid)
         WHEN 'pg_type'::regclass THEN
           (SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
              FROM pg_enum e WHERE e.enumtypid = m.objid)
       END, '') || ' | ' ||
       coalesce(obj_description(m.objid, (SELECT relname FROM pg_class WHERE oid = m.classid)), '')
  FROM members m
UNION ALL
SELECT 'config dump | ' || coalesce((SELECT string_agg(c::regclass::text, ',' ORDER BY c::regclass::text)
                                       FROM unnest(e.extconfig) c), '')
       || ' | ' || coalesce(e.extcondition::text, '')
  FROM pg_extension e WHERE e.extname = 'idempotency'
ORDER BY 1};

my $default_version = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'idempotency'");
my @versions = split /\n/, $node->safe_psql('postgres', q{
	SELECT version FROM pg_available_extension_versions WHERE name = 'idempotency'
	 ORDER BY string_to_array(regexp_replace(version, '[^0-9.]', '', 'g'), '.')::int[]});
ok(@versions >= 1, 'installable versions: ' . join(', ', @versions) . "; default $default_version");

$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION idempotency');
my $fresh = $node->safe_psql('fresh', $objects);
my $n_objects = () = $fresh =~ /\n/g;
ok($n_objects > 20, "a fresh install has its objects ($n_objects lines)");

# filled_database(name, version): a new database with the extension at
# version and every kind of record; returns its name and the records' digest
sub filled_database
{
	my ($db, $version) = @_;
	$db =~ s/\W/_/g;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, "CREATE EXTENSION idempotency VERSION '$version'");
	$node->safe_psql($db, $fill);
	$node->safe_psql($db, $fill_tokens) if $has_tokens;
	$node->safe_psql($db, $fill_more);
	my $before = $node->safe_psql($db, $records_digest);
	return ($db, $before);
}

# upgrade_path_check(version): create at version, update to the default,
# compare with the fresh install; returns the differences
sub upgrade_path_check
{
	my ($version) = @_;
	my ($db, $before) = filled_database("upgrade_from_$version", $version);
	$node->safe_psql($db, 'ALTER EXTENSION idempotency UPDATE');
	is($node->safe_psql($db, "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'"),
		$default_version, "from $version: ALTER EXTENSION UPDATE reaches $default_version");
	my $upgraded = $node->safe_psql($db, $objects);
	is($upgraded, $fresh, "from $version: the objects and their definitions equal a fresh install");
	is($node->safe_psql($db, $records_digest), $before, "from $version: the records are untouched by the update");
	check_replays($db, "from $version");
	check_after_update($db, "from $version");
	return $db;
}

my $db;
$db = upgrade_path_check($_) for @versions;

# stepwise_check(version): create at version, then ALTER EXTENSION UPDATE
# TO each later version in turn (1.0, then 1.1, then 1.2), as a
# deployment that updated at every release did; records made before the
# first step survive every step, and the result equals a fresh install
sub stepwise_check
{
	my ($version) = @_;
	my @later = grep { version_list($_) gt version_list($version) } @versions;
	my ($db, $before) = filled_database("stepwise_from_$version", $version);
	for my $step (@later)
	{
		$node->safe_psql($db, "ALTER EXTENSION idempotency UPDATE TO '$step'");
		is($node->safe_psql($db, "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'"),
			$step, "from $version step by step: at $step");
		is($node->safe_psql($db, $records_digest), $before,
			"from $version step by step: the records are untouched by the update to $step");
	}
	is($node->safe_psql($db, $objects), $fresh,
		"from $version step by step: the objects and their definitions equal a fresh install");
	check_replays($db, "from $version step by step");
	check_after_update($db, "from $version step by step");
}
# versions as zero-padded strings, so that gt orders 1.10 after 1.9
sub version_list { return join '.', map { sprintf '%05d', $_ } split /\./, $_[0]; }
# (from a version with one later version, the path above is already one step)
for my $v (@versions)
{
	stepwise_check($v) if (grep { version_list($_) gt version_list($v) } @versions) >= 2;
}

# privileges_check(version): a deployment's own privileges on idem_claim
# (which 1.1 replaces) survive the update, and pg_dump still dumps them
# (they must not become initial privileges of the extension)
sub privileges_check
{
	my ($version) = @_;
	my $db = "privileges_from_$version";
	$db =~ s/\W/_/g;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, qq{
		CREATE EXTENSION idempotency VERSION '$version';
		DO \$\$ BEGIN CREATE ROLE upgrade_app; EXCEPTION WHEN duplicate_object THEN NULL; END \$\$;
		REVOKE EXECUTE ON FUNCTION idem_claim FROM PUBLIC;
		GRANT EXECUTE ON FUNCTION idem_claim TO upgrade_app;
		ALTER EXTENSION idempotency UPDATE;});
	is($node->safe_psql($db, q{
		SELECT has_function_privilege('upgrade_app', p.oid, 'EXECUTE') || ' ' ||
		       has_function_privilege('public', p.oid, 'EXECUTE')
		  FROM pg_proc p WHERE p.proname = 'idem_claim'}),
		'true false', "from $version: the privileges granted on idem_claim survive the update");
	my ($dump) = run_command([ 'pg_dump', '--schema-only', '-d', $node->connstr($db) ]);
	like($dump, qr/GRANT ALL ON FUNCTION public\.idem_claim\(.*\) TO upgrade_app;/,
		"from $version: pg_dump still dumps them");
	my ($rc, $out, $err) = $node->psql($db, 'DROP ROLE upgrade_app');
	like($err, qr/role "upgrade_app" cannot be dropped because some objects depend on it/,
		"from $version: the grantee's dependency is recorded (DROP ROLE refuses)");
}
privileges_check($_) for grep { $_ ne $default_version } @versions;

# the comparison notices a difference: take one function out of the
# extension and compare again
$node->safe_psql($db, 'ALTER EXTENSION idempotency DROP FUNCTION idem_fingerprint(jsonb)');
isnt($node->safe_psql($db, $objects), $fresh,
	'the comparison would notice a missing object');

$node->stop;
done_testing();
