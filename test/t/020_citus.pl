# The extension on Citus, with default settings: idempotent_record and
# idempotency_token distributed by scope and co-located with a tenant
# table, first on a single node whose coordinator holds the shards, then on
# a coordinator plus one worker (Citus MX) with the client connected to the
# worker.  Covers the ten-line example, duplicates (waiting, wait => false,
# across nodes), leases, fencing and takeover, the commit guard, purge,
# idem_once, tokens, idem_pending's order, idem_transition on a (scope, id)
# key, the guards, and that no record or token ever lands in the local
# (shell) table of any node.  Also: the server refuses to start with
# idempotency preloaded before citus.
#
# Runs only where Citus is installed into the server under test; skipped
# with one line otherwise.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use IdemTest;

my $pkglibdir = `pg_config --pkglibdir`;
chomp $pkglibdir;
plan skip_all => "Citus is not installed into this server ($pkglibdir/citus.so is missing)"
  unless -f "$pkglibdir/citus.so";

sub citus_node
{
	my ($name, $preload) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	# no autovacuum: an emptied shell table must keep its size (see below)
	$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = '$preload'
listen_addresses = '127.0.0.1'
max_prepared_transactions = 20
autovacuum = off
citus.shard_count = 8
});
	return $node;
}

# error of a statement, with its SQLSTATE, or "no error"
sub sql_error
{
	my ($rc, $out, $err) = psql_verbose(@_);
	return $rc == 0 ? "no error" : $err;
}

# The server's clock, less an interval, as a literal: Citus routes an
# UPDATE of a distributed table with constants, whatever the shards' clocks
sub server_time
{
	my ($node, $ago) = @_;
	return $node->safe_psql('postgres', "SELECT clock_timestamp() - interval '$ago'");
}

# end_lease(NODE, SCOPE, KEY): the lease of a record ends now, as if its
# worker had stopped extending it
sub end_lease
{
	my ($node, $scope, $key) = @_;
	my $past = server_time($node, '1 second');
	$node->safe_psql('postgres',
		"UPDATE idempotent_record SET locked_until = '$past' WHERE scope = '$scope' AND key = '$key'");
	return;
}

# age_records(NODE, CONDITION): the records matching CONDITION were claimed
# and recorded two days ago with a ttl of one day, so they are past their
# retention (a live lease still holds its record); so are the tokens not
# consumed yet
sub age_records
{
	my ($node, $condition) = @_;
	my $two_days = server_time($node, '2 days');
	my $one_day = server_time($node, '1 day');
	$node->safe_psql('postgres', qq{
UPDATE idempotent_record SET created_at = '$two_days', updated_at = '$two_days', expires_at = '$one_day'
 WHERE $condition;
UPDATE idempotency_token SET created_at = '$two_days', expires_at = '$one_day' WHERE consumed_at IS NULL;});
	return;
}

# A session whose next statement may wait: send it, then collect it
sub send_query
{
	my ($session, $sql) = @_;
	$session->{stdin} .= "$sql\n";
	$session->{run}->pump_nb;
}

sub collect
{
	my ($session) = @_;
	my $out = $session->query_until(qr/__collected__\n/, "\\echo __collected__\n");
	$out =~ s/__collected__\n//;
	chomp $out;
	return $out;
}

# Is some backend of any node waiting for a lock of this database?
sub lock_wait_seen
{
	my @nodes = @_;
	foreach my $try (1 .. 300)
	{
		foreach my $node (@nodes)
		{
			return 1
			  if $node->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
			  ) > 0;
		}
		select(undef, undef, undef, 0.1);
	}
	return 0;
}

# Distribute the extension's tables and a tenant table on the coordinator
sub distribute
{
	my ($coordinator) = @_;
	$coordinator->safe_psql('postgres', q{
CREATE EXTENSION idempotency;
SELECT create_distributed_table('idempotent_record', 'scope');
SELECT create_distributed_table('idempotency_token', 'scope', colocate_with => 'idempotent_record');
CREATE TABLE orders (scope text, id bigint, status text NOT NULL DEFAULT 'new',
                     version integer NOT NULL DEFAULT 0, PRIMARY KEY (scope, id));
SELECT create_distributed_table('orders', 'scope', colocate_with => 'idempotent_record');
SET citus.enable_unsafe_triggers = on;
CREATE TRIGGER orders_status BEFORE UPDATE ON orders FOR EACH ROW
    EXECUTE FUNCTION idem_transition_guard('status', 'new>paid', 'paid>shipped');
CREATE TRIGGER orders_version BEFORE UPDATE ON orders FOR EACH ROW
    EXECUTE FUNCTION idem_version_guard('version');
CREATE ROLE regress_app LOGIN;
GRANT SELECT, INSERT, UPDATE ON idempotent_record, idempotency_token, orders TO regress_app;
CREATE ROLE regress_nobody LOGIN;
});
}

# The node that holds the shard of scope (its port)
sub shard_port
{
	my ($coordinator, $scope) = @_;
	return $coordinator->safe_psql('postgres', qq{
SELECT nodeport FROM pg_dist_shard_placement
 WHERE shardid = get_shard_id_for_distribution_column('idempotent_record', '$scope')});
}

# The scenarios, through client (the node the application connects to);
# nodes are all the cluster's nodes; label names the setup; scopes are
# the tenants to use, one of them (the first) for the single-scope tests.
sub scenarios
{
	my ($label, $client, $nodes, @scopes) = @_;
	my $s = $scopes[0];
	my $fp = q{idem_fingerprint('{"sku": 7, "qty": 1}')};
	my $other_fp = q{idem_fingerprint('{"sku": 8}')};

	# the ten-line example
	is( $client->safe_psql('postgres', qq{
BEGIN;
SELECT outcome FROM idem_claim('ord-1', scope => '$s', fingerprint => $fp);
INSERT INTO orders (scope, id) VALUES ('$s', 1001);
SELECT idem_finish('ord-1', '{"order_id": 1001}', scope => '$s');
COMMIT;
SELECT outcome || ' ' || result::text FROM idem_claim('ord-1', scope => '$s', fingerprint => $fp);
}), "claimed\n\nreplay {\"order_id\": 1001}",
		"$label: the ten-line example claims, finishes and replays");
	like(sql_error($client, "SELECT idem_claim('ord-1', scope => '$s', fingerprint => $other_fp)"),
		qr/IK001/, "$label: a reused key with another body raises IK001");
	is($client->safe_psql('postgres', "SELECT count(*) FROM orders WHERE scope = '$s'"),
		'1', "$label: one order");

	# concurrent duplicates, in every scope (shards on every node)
	foreach my $scope (@scopes)
	{
		my $a = $client->background_psql('postgres', on_error_stop => 0);
		my $b = $nodes->[0]->background_psql('postgres', on_error_stop => 0);
		$a->query_safe('BEGIN');
		is($a->query_safe("SELECT outcome FROM idem_claim('dup', scope => '$scope', fingerprint => $fp)"),
			'claimed', "$label/$scope: the first claim of a key");
		$a->query_safe("INSERT INTO orders (scope, id) VALUES ('$scope', 2)");
		is($b->query_safe("SELECT outcome FROM idem_claim('dup', scope => '$scope', fingerprint => $fp, wait => false)"),
			'in_progress', "$label/$scope: wait => false answers in_progress for an uncommitted claim");
		like(sql_error($nodes->[0], "SELECT idem_claim('dup', scope => '$scope', fingerprint => $other_fp, wait => false)"),
			qr/IK001/, "$label/$scope: wait => false with another body raises IK001 for an uncommitted claim");
		is($nodes->[0]->safe_psql('postgres', "SET ROLE regress_app; SELECT outcome FROM idem_claim('dup', scope => '$scope', fingerprint => $fp, wait => false)"),
			'in_progress', "$label/$scope: ... also for an application role (the probe runs as the caller)");
		like(sql_error($nodes->[0], "SET ROLE regress_nobody; SELECT idem_claim('dup', scope => '$scope', wait => false)"),
			qr/42501/, "$label/$scope: a role without privileges gets 42501");
		send_query($b, "SELECT outcome, result FROM idem_claim('dup', scope => '$scope', fingerprint => $fp);");
		ok(lock_wait_seen(@$nodes), "$label/$scope: a duplicate waits for the uncommitted claim");
		$a->query_safe("SELECT idem_finish('dup', '{\"n\": 2}', scope => '$scope')");
		$a->query_safe('COMMIT');
		is(collect($b), 'replay|{"n": 2}', "$label/$scope: ... and replays its outcome after the commit");

		# a claim that rolls back leaves the key to the waiting duplicate
		$a->query_safe('BEGIN');
		$a->query_safe("SELECT idem_claim('dup-rb', scope => '$scope')");
		send_query($b, "BEGIN; SELECT outcome, fence FROM idem_claim('dup-rb', scope => '$scope');");
		ok(lock_wait_seen(@$nodes), "$label/$scope: a duplicate waits again");
		$a->query_safe('ROLLBACK');
		is(collect($b), 'claimed|1', "$label/$scope: ... and claims the key after the rollback");
		$b->query_safe("SELECT idem_finish('dup-rb', '{}', scope => '$scope'); COMMIT");
		$a->quit;
		$b->quit;
	}

	# leases, fencing, takeover with the recovery point; the lease is long
	# enough to outlive the statements below on a busy machine, and its end
	# is forced, as a worker's crash would leave it
	is($client->safe_psql('postgres',
			"SELECT outcome || ' ' || fence FROM idem_claim('pay-1', scope => '$s', lease => '1 hour')"),
		'claimed 1', "$label: a leased claim");
	$client->safe_psql('postgres', "SELECT idem_checkpoint('pay-1', 'charged', scope => '$s', fence => 1)");
	is($client->safe_psql('postgres',
			"SELECT outcome FROM idem_claim('pay-1', scope => '$s', lease => '30 seconds')"),
		'in_progress', "$label: a duplicate during the lease is in_progress");
	end_lease($client, $s, 'pay-1');
	is($client->safe_psql('postgres',
			"SELECT outcome || ' ' || fence || ' ' || recovery_point FROM idem_claim('pay-1', scope => '$s', lease => '30 seconds')"),
		'claimed 2 charged', "$label: after the lease, a takeover with fence 2 and the recovery point");
	like(sql_error($client, "SELECT idem_finish('pay-1', '{}', scope => '$s', fence => 1)"),
		qr/IK003/, "$label: the stale fence is refused (IK003)");
	$client->safe_psql('postgres', "SELECT idem_extend_lease('pay-1', '60 seconds', scope => '$s', fence => 2)");
	$client->safe_psql('postgres', "SELECT idem_finish('pay-1', '{\"charge\": \"ch_1\"}', scope => '$s', fence => 2)");
	is($client->safe_psql('postgres',
			"SELECT status || ' ' || result::text FROM idem_lookup('pay-1', scope => '$s')"),
		'succeeded {"charge": "ch_1"}', "$label: the new fence records the outcome");

	# failures: retryable releases, final replays
	$client->safe_psql('postgres', qq{
BEGIN;
SELECT idem_claim('f-1', scope => '$s');
SELECT idem_fail('f-1', '{"e": "final"}', retryable => false, scope => '$s');
COMMIT;});
	is($client->safe_psql('postgres', "SELECT outcome || ' ' || status FROM idem_claim('f-1', scope => '$s')"),
		'replay failed', "$label: a final failure replays");

	# the commit guard, in every scope
	foreach my $scope (@scopes)
	{
		like(sql_error($client, qq{
BEGIN;
SELECT idem_claim('guarded', scope => '$scope');
INSERT INTO orders (scope, id) VALUES ('$scope', 3);
COMMIT;}), qr/IK004/, "$label/$scope: a commit without an outcome raises IK004");
		is($client->safe_psql('postgres', qq{
SELECT (SELECT count(*) FROM orders WHERE scope = '$scope' AND id = 3)
     + (SELECT count(*) FROM idempotent_record WHERE scope = '$scope' AND key = 'guarded')}),
			'0', "$label/$scope: ... and neither the claim nor the business row committed");
	}

	# idem_mark_unknown and idem_pending, oldest first across shards
	my $n = 0;
	foreach my $scope (reverse(@scopes), @scopes)
	{
		$n++;
		$client->safe_psql('postgres', qq{
SELECT idem_claim('pend-$n', scope => '$scope', lease => '1 hour');
SELECT idem_mark_unknown('pend-$n', '{"n": $n}', scope => '$scope', fence => 1);});
	}
	is($client->safe_psql('postgres',
			"SELECT string_agg(key, ',') FROM (SELECT key FROM idem_pending WHERE key LIKE 'pend-%') p"),
		join(',', map { "pend-$_" } 1 .. $n),
		"$label: idem_pending lists records oldest first across shards");
	is($client->safe_psql('postgres', "SELECT outcome FROM idem_claim('pend-1', scope => '$scopes[-1]')"),
		'in_progress', "$label: an unknown outcome answers in_progress");
	$client->safe_psql('postgres',
		"SELECT idem_finish('pend-1', '{}', scope => '$scopes[-1]', fence => 1)");
	is($client->safe_psql('postgres', "SELECT count(*) FROM idem_pending WHERE key = 'pend-1'"),
		'0', "$label: a reconciled record leaves idem_pending");

	# idem_once
	is($client->safe_psql('postgres',
			"SELECT idem_once('msg-1', scope => '$s'); SELECT idem_once('msg-1', scope => '$s')"),
		"t\nf", "$label: idem_once is true the first time only");

	# tokens
	my $token = $client->safe_psql('postgres', "SELECT idem_token_issue(scope => '$s')");
	is($client->safe_psql('postgres', qq{
SELECT idem_token_consume('$token', scope => '$s');
SELECT idem_token_consume('$token', scope => '$s');
SELECT idem_token_consume('$token', scope => 'elsewhere');}),
		"t\nf\nf", "$label: a token is consumed once, in its scope only");

	# idem_transition on a (scope, id) key, and the guards
	is($client->safe_psql('postgres', qq{
SELECT idem_transition('orders', ROW('$s', 1001::bigint), 'paid', ARRAY['new']);
SELECT idem_transition('orders', ROW('$s', 1001), 'paid', ARRAY['new']);
SELECT idem_transition('orders', ROW('$s', 1001), 'new', ARRAY['shipped']);
SELECT idem_transition('orders', ROW('$s', 9999), 'paid', ARRAY['new']);}),
		"applied\nalready\nrejected\nnot_found",
		"$label: idem_transition on a (scope, id) primary key");
	like(sql_error($client, "UPDATE orders SET status = 'new', version = 1 WHERE scope = '$s' AND id = 1001"),
		qr/IK005/, "$label: the transition guard refuses paid > new (IK005)");
	like(sql_error($client, "UPDATE orders SET status = 'shipped', version = 0 WHERE scope = '$s' AND id = 1001"),
		qr/IK006/, "$label: the version guard refuses a stale version (IK006)");
	is($client->safe_psql('postgres', qq{
UPDATE orders SET status = 'shipped', version = 1 WHERE scope = '$s' AND id = 1001;
SELECT status || ' ' || version FROM orders WHERE scope = '$s' AND id = 1001;}),
		'shipped 2', "$label: an allowed move with the current version passes, version bumped");

	# purge: expired records of every scope, in batches, never a locked one
	foreach my $scope (@scopes)
	{
		$client->safe_psql('postgres', qq{
SELECT idem_once('old-' || i, scope => '$scope') FROM generate_series(1, 5) i;
SELECT idem_token_issue(scope => '$scope');
SELECT idem_claim('leased-old', scope => '$scope', lease => '1 hour');});
	}
	age_records($client, "key LIKE 'old-%' OR key = 'leased-old'");
	my $locker = $client->background_psql('postgres');
	$locker->query_safe('BEGIN');
	# a claim reclaiming an expired record holds it until it commits
	is($locker->query_safe("SELECT outcome FROM idem_claim('old-1', scope => '$s')"),
		'claimed', "$label: a claim reclaims an expired record");
	is($client->safe_psql('postgres', "SET statement_timeout = '20s'; SELECT idem_purge(3)"),
		'3', "$label: idem_purge deletes one batch");
	is($client->safe_psql('postgres', "SET statement_timeout = '20s'; CALL idem_purge_all(4); SELECT count(*) FROM idempotent_record WHERE key LIKE 'old-%'"),
		'1', "$label: idem_purge_all deletes every expired record but the one a claim holds, without waiting for it");
	is($client->safe_psql('postgres', "SELECT count(*) FROM idempotent_record WHERE key = 'leased-old'"),
		scalar(@scopes), "$label: records under a live lease are kept");
	is($client->safe_psql('postgres', "SELECT count(*) FROM idempotency_token WHERE expires_at <= now()"),
		'0', "$label: expired tokens are purged");
	$locker->query_safe("SELECT idem_finish('old-1', '{}', scope => '$s')");
	$locker->query_safe('COMMIT');
	$locker->quit;
	is($client->safe_psql('postgres', "SELECT outcome FROM idem_claim('old-1', scope => '$s')"),
		'replay', "$label: the reclaimed record survived the purge");

	# nothing in any shell table, ever (autovacuum is off, so a table that
	# ever held a row keeps its pages)
	foreach my $node (@$nodes)
	{
		is($node->safe_psql('postgres',
				"SELECT pg_relation_size('idempotent_record') + pg_relation_size('idempotency_token')"),
			'0', "$label: no record or token landed in the shell tables of node " . $node->name);
	}
	ok($client->safe_psql('postgres', 'SELECT count(*) FROM idempotent_record') > 0,
		"$label: the records are in the shards");
}

# 1. single node: the coordinator holds the shards
my $single = citus_node('citus_single', 'citus,idempotency');
$single->start;
$single->safe_psql('postgres', q{
CREATE EXTENSION citus;
SELECT citus_set_coordinator_host('127.0.0.1', } . $single->port . q{);
SELECT citus_set_node_property('127.0.0.1', } . $single->port . q{, 'shouldhaveshards', true);});
distribute($single);
scenarios('single node', $single, [$single], 'acct_1', 'acct_2', 'acct_3');

# idempotency not preloaded: loaded on first use, after citus, so the
# commit guard still runs before Citus commits
$single->adjust_conf('postgresql.conf', 'shared_preload_libraries', "'citus'");
$single->restart;
like(sql_error($single, q{
BEGIN;
SELECT idem_claim('lazy', scope => 'acct_2');
INSERT INTO orders (scope, id) VALUES ('acct_2', 4);
COMMIT;}), qr/IK004/, 'loaded on first use: a commit without an outcome raises IK004');
is($single->safe_psql('postgres',
		"SELECT count(*) FROM orders WHERE scope = 'acct_2' AND id = 4"),
	'0', '... and the business row did not commit');
$single->stop;

# 2. a coordinator and one worker, the client connected to the worker
my $coordinator = citus_node('citus_coordinator', 'citus,idempotency');
my $worker = citus_node('citus_worker', 'citus,idempotency');
$coordinator->start;
$worker->start;
$worker->safe_psql('postgres', 'CREATE EXTENSION citus');
$coordinator->safe_psql('postgres', 'CREATE EXTENSION citus; SELECT citus_set_coordinator_host(\'127.0.0.1\', '
	  . $coordinator->port . q{); SELECT citus_set_node_property('127.0.0.1', }
	  . $coordinator->port . q{, 'shouldhaveshards', true); SELECT citus_add_node('127.0.0.1', }
	  . $worker->port . ')');
distribute($coordinator);

# one tenant whose shard is on the worker, one on the coordinator
my ($on_worker, $on_coordinator);
foreach my $i (1 .. 50)
{
	my $port = shard_port($coordinator, "tenant_$i");
	$on_worker //= "tenant_$i" if $port == $worker->port;
	$on_coordinator //= "tenant_$i" if $port == $coordinator->port;
}
ok(defined $on_worker && defined $on_coordinator, 'tenants with shards on both nodes');
scenarios('coordinator + worker', $worker, [$coordinator, $worker], $on_coordinator, $on_worker);

# Delegated mode: a role without privileges on the extension's tables,
# its scopes granted; the grants replicated and the per-key functions
# delegated to the shard's node by the SQL of docs/citus.md, run as printed
my ($delegate_sql) = slurp_file("$ENV{TESTDIR}/docs/citus.md")
  =~ /## Least privilege on Citus.*?```sql\n(.*?)```/s;
ok(defined $delegate_sql, 'docs/citus.md has the delegation SQL');
$coordinator->safe_psql('postgres', $delegate_sql);
$coordinator->safe_psql('postgres', qq{
CREATE ROLE regress_tenant LOGIN;
GRANT SELECT, INSERT ON orders TO regress_tenant;
INSERT INTO idem_scope_grant VALUES ('regress_tenant', '$on_worker'), ('regress_tenant', '$on_coordinator');});
my $n = 100;
foreach my $client ($coordinator, $worker)
{
	my $from = $client == $coordinator ? 'the coordinator' : 'the worker';
	foreach my $scope ($on_coordinator, $on_worker)
	{
		my $held = $scope eq $on_worker ? 'the worker' : 'the coordinator';
		$n++;
		is($client->safe_psql('postgres', qq{
SET ROLE regress_tenant;
BEGIN;
SELECT outcome FROM idem_claim('del-$n', scope => '$scope');
INSERT INTO orders (scope, id) VALUES ('$scope', $n);
SELECT idem_finish('del-$n', '{"n": $n}', scope => '$scope');
COMMIT;
SELECT outcome || ' ' || (result ->> 'n') FROM idem_claim('del-$n', scope => '$scope');}),
			"claimed\n\nreplay $n",
			"delegated mode from $from, shard on $held: claim, business row and outcome commit together, then replay");
	}
	like(sql_error($client, "SET ROLE regress_tenant; SELECT idem_claim('del', scope => 'tenant_not_granted')"),
		qr/42501/, "delegated mode from $from: a scope not granted is refused (42501)");
}
is($coordinator->safe_psql('postgres', 'SELECT count(*) FROM orders WHERE id BETWEEN 101 AND 104'), '4',
	'delegated mode: one business row per request');
# a grant removed on the coordinator is gone on the worker at commit
$coordinator->safe_psql('postgres', "DELETE FROM idem_scope_grant WHERE pattern = '$on_worker'");
like(sql_error($worker, "SET ROLE regress_tenant; SELECT idem_lookup('del-101', '$on_worker')"),
	qr/42501/, 'a grant removed on the coordinator is refused on the worker at once');
$worker->stop;
$coordinator->stop;

# 3. preloaded before citus, the server does not start
my $wrong = citus_node('citus_wrong_order', 'idempotency,citus');
my $started = $wrong->start(fail_ok => 1);
ok(!$started, 'the server refuses to start with idempotency preloaded before citus');
like(slurp_file($wrong->logfile), qr/idempotency must be preloaded after citus/,
	'... and says why');

done_testing();
