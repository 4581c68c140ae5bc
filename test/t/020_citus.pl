# The extension on Citus, with default settings (default
# citus.shard_count): idempotent_record and idempotency_token distributed
# by scope and co-located with a tenant table, first on a single node whose
# coordinator holds the shards, then on a coordinator plus two workers
# (Citus MX) set up by the marked blocks of docs/citus.md run as printed,
# with clients on every node.  Covers the ten-line example, duplicates
# (waiting, wait => false, across nodes), leases, fencing and takeover,
# the commit guard, purge (its batch bound in a scope of thousands of
# records), idem_once, tokens, idem_pending's order, idem_transition on a
# (tenant, id) key, the guards, wait_for_outcome woken across nodes,
# delegated mode (grants written before and after the recipe, the
# recipe after the README's step 5, {setting} grants, leased claims with
# one, idem_pending as the maintenance role from every node),
# idempotency_cluster_stats() from every node, shard moves under load by
# examples/citus_move_tenant.sh (also through the distributed deadlock,
# step by step), a node killed at COMMIT whose request committed, TLS
# between the nodes, and that no record or token ever lands in the local
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
use List::Util qw(sum);
use POSIX qw(WNOHANG);

my $pkglibdir = `pg_config --pkglibdir`;
chomp $pkglibdir;
plan skip_all => "Citus is not installed into this server ($pkglibdir/citus.so is missing)"
  unless -f "$pkglibdir/citus.so";

# The blocks of docs/citus.md marked "tested by test/t/020_citus.pl: WHERE",
# as [WHERE, TEXT] in their order
my @doc_blocks;
{
	my $doc = slurp_file("$ENV{TESTDIR}/docs/citus.md");
	while ($doc =~ /<!-- tested by test\/t\/020_citus\.pl: (.*?) -->\n```(?:sql)?\n(.*?)```/sg)
	{
		push @doc_blocks, [ $1, $2 ];
	}
}
is_deeply([ map { $_->[0] } @doc_blocks ],
	[ 'postgresql.conf of every node', 'on each worker', ('on the coordinator') x 5, 'as app, on any node' ],
	'docs/citus.md has the marked blocks: settings, nodes, distribution, tenant table, guard, least privilege, a leased claim with a {setting} grant');
my ($doc_conf, $doc_worker, $doc_nodes, $doc_distribute, $doc_orders, $doc_guard, $doc_recipe, $doc_leased) =
  map { $_->[1] } @doc_blocks;
# the TLS setting is in the settings block, not in prose only (issue 31)
like($doc_conf, qr/^citus\.node_conninfo = 'sslmode=(require|verify-full)[ ']/m,
	'docs/citus.md: the settings block makes nodes talk to each other over TLS only');

# The README's step 5 (the grants of the install checklist), which an
# operator may have run before docs/citus.md's least-privilege recipe
my ($readme_grants) =
  grep { /INSERT INTO idem_scope_grant/ }
  map  { (my $sql = $_) =~ s/^ {3}//mg; $sql }
  slurp_file("$ENV{TESTDIR}/README.md") =~ /<!-- tested by test\/t\/021_readme\.pl -->\n[ \t]*```sql\n(.*?)\n[ \t]*```/sg;
like($readme_grants, qr/\('app', '\*'\)/, "README step 5 grants app '*'");

# A node with the settings of docs/citus.md, preloading preload
sub citus_node
{
	my ($name, $preload) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', $doc_conf);
	# no autovacuum: an emptied shell table must keep its size (see below);
	# the server's defaults for logical replication (shard moves), which
	# PostgreSQL::Test::Cluster sets to 0
	$node->append_conf('postgresql.conf', qq{
max_wal_senders = 10
max_replication_slots = 10
shared_preload_libraries = '$preload'
listen_addresses = '127.0.0.1'
max_prepared_transactions = 20
autovacuum = off
citus.log_distributed_deadlock_detection = on
log_lock_waits = on
});
	return $node;
}

# citus_end_lease(NODE, SCOPE, KEY): the lease of a record ends now, as if
# its worker had stopped extending it (the server's clock, as a literal:
# Citus routes an UPDATE of a distributed table with constants)
sub citus_end_lease
{
	my ($node, $scope, $key) = @_;
	my $past = $node->safe_psql('postgres', "SELECT clock_timestamp() - interval '1 second'");
	$node->safe_psql('postgres',
		"UPDATE idempotent_record SET locked_until = '$past' WHERE scope = '$scope' AND key = '$key'");
	return;
}

# error of a statement, with its SQLSTATE, or "no error"
sub sql_error
{
	my ($rc, $out, $err) = psql_verbose(@_);
	return $rc == 0 ? "no error" : $err;
}

# output of a statement, or its error: a test that compares it fails,
# rather than dies, when the statement fails
sub answer
{
	my ($rc, $out, $err) = psql_verbose(@_);
	return $rc == 0 ? $out : $err;
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

# Is some backend of any node waiting for a lock of this database?  Asked
# until seen, 0.1 s apart, at most 10 x timeout_default times: a bound for
# a wait that never comes, not a guess of how long one takes to come
sub lock_wait_seen
{
	my @nodes = @_;
	foreach my $try (1 .. 10 * $PostgreSQL::Test::Utils::timeout_default)
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
	$coordinator->safe_psql('postgres', $_) foreach ($doc_distribute, $doc_orders, $doc_guard);
	$coordinator->safe_psql('postgres', q{
SET citus.enable_unsafe_triggers = on;
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
	my $in = join(', ', map { "'$_'" } @scopes);    # this run's scopes, in SQL
	my $fp = q{idem_fingerprint('{"sku": 7, "qty": 1}')};
	my $other_fp = q{idem_fingerprint('{"sku": 8}')};

	# the ten-line example
	is( $client->safe_psql('postgres', qq{
BEGIN;
SELECT outcome FROM idem_claim('ord-1', scope => '$s', fingerprint => $fp);
INSERT INTO orders (tenant, id) VALUES ('$s', 1001);
SELECT idem_finish('ord-1', '{"order_id": 1001}', scope => '$s');
COMMIT;
SELECT outcome || ' ' || result::text FROM idem_claim('ord-1', scope => '$s', fingerprint => $fp);
}), "claimed\n\nreplay {\"order_id\": 1001}",
		"$label: the ten-line example claims, finishes and replays");
	like(sql_error($client, "SELECT idem_claim('ord-1', scope => '$s', fingerprint => $other_fp)"),
		qr/IK001/, "$label: a reused key with another body raises IK001");
	is($client->safe_psql('postgres', "SELECT count(*) FROM orders WHERE tenant = '$s'"),
		'1', "$label: one order");

	# concurrent duplicates, in every scope (shards on every node)
	foreach my $scope (@scopes)
	{
		my $a = $client->background_psql('postgres', on_error_stop => 0);
		my $b = $nodes->[0]->background_psql('postgres', on_error_stop => 0);
		$a->query_safe('BEGIN');
		is($a->query_safe("SELECT outcome FROM idem_claim('dup', scope => '$scope', fingerprint => $fp)"),
			'claimed', "$label/$scope: the first claim of a key");
		$a->query_safe("INSERT INTO orders (tenant, id) VALUES ('$scope', 2)");
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
	citus_end_lease($client, $s, 'pay-1');
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
INSERT INTO orders (tenant, id) VALUES ('$scope', 3);
COMMIT;}), qr/IK004/, "$label/$scope: a commit without an outcome raises IK004");
		is($client->safe_psql('postgres', qq{
SELECT (SELECT count(*) FROM orders WHERE tenant = '$scope' AND id = 3)
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
			"SELECT string_agg(key, ',') FROM (SELECT key FROM idem_pending WHERE key LIKE 'pend-%' AND scope IN ($in)) p"),
		join(',', map { "pend-$_" } 1 .. $n),
		"$label: idem_pending lists records oldest first across shards");
	is($client->safe_psql('postgres', "SELECT outcome FROM idem_claim('pend-1', scope => '$scopes[-1]')"),
		'in_progress', "$label: an unknown outcome answers in_progress");
	$client->safe_psql('postgres',
		"SELECT idem_finish('pend-1', '{}', scope => '$scopes[-1]', fence => 1)");
	is($client->safe_psql('postgres', "SELECT count(*) FROM idem_pending WHERE key = 'pend-1' AND scope = '$scopes[-1]'"),
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
	like(sql_error($client, "UPDATE orders SET status = 'new', version = 1 WHERE tenant = '$s' AND id = 1001"),
		qr/IK005/, "$label: the transition guard refuses paid > new (IK005)");
	like(sql_error($client, "UPDATE orders SET status = 'shipped', version = 0 WHERE tenant = '$s' AND id = 1001"),
		qr/IK006/, "$label: the version guard refuses a stale version (IK006)");
	is($client->safe_psql('postgres', qq{
UPDATE orders SET status = 'shipped', version = 1 WHERE tenant = '$s' AND id = 1001;
SELECT status || ' ' || version FROM orders WHERE tenant = '$s' AND id = 1001;}),
		'shipped 2', "$label: an allowed move with the current version passes, version bumped");

	# purge: expired records of every scope, in batches, never a locked one
	foreach my $scope (@scopes)
	{
		$client->safe_psql('postgres', qq{
SELECT idem_once('old-' || i, scope => '$scope', ttl => '1 second') FROM generate_series(1, 5) i;
SELECT idem_token_issue(scope => '$scope', ttl => '1 second');
SELECT idem_claim('leased-old', scope => '$scope', lease => '1 hour', ttl => '1 second');});
	}
	$client->safe_psql('postgres', 'SELECT pg_sleep(1.2)');
	my $locker = $client->background_psql('postgres');
	$locker->query_safe('BEGIN');
	# a claim reclaiming an expired record holds it until it commits
	is($locker->query_safe("SELECT outcome FROM idem_claim('old-1', scope => '$s')"),
		'claimed', "$label: a claim reclaims an expired record");
	is($client->safe_psql('postgres', "SET statement_timeout = '20s'; SELECT idem_purge(3)"),
		'3', "$label: idem_purge deletes one batch");
	is($client->safe_psql('postgres', "SET statement_timeout = '20s'; CALL idem_purge_all(4); SELECT count(*) FROM idempotent_record WHERE key LIKE 'old-%' AND scope IN ($in)"),
		'1', "$label: idem_purge_all deletes every expired record but the one a claim holds, without waiting for it");
	is($client->safe_psql('postgres', "SELECT count(*) FROM idempotent_record WHERE key = 'leased-old' AND scope IN ($in)"),
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
INSERT INTO orders (tenant, id) VALUES ('acct_2', 4);
COMMIT;}), qr/IK004/, 'loaded on first use: a commit without an outcome raises IK004');
is($single->safe_psql('postgres',
		"SELECT count(*) FROM orders WHERE tenant = 'acct_2' AND id = 4"),
	'0', '... and the business row did not commit');
$single->stop;

# 2. a coordinator and two workers, set up as docs/citus.md prints it
my $coordinator = citus_node('citus_coordinator', 'citus,idempotency');
my @workers = map { citus_node("citus_worker$_", 'citus,idempotency') } 1, 2;
my @nodes = ($coordinator, @workers);
$_->start foreach @nodes;
$_->safe_psql('postgres', $doc_worker) foreach @workers;
# the docs' host names and ports are the only thing replaced
my @addresses = map { "'127.0.0.1', " . $_->port } @nodes;
(my $nodes_sql = $doc_nodes) =~ s/'[\w.-]+\.example', 5432/shift @addresses/ge;
is(scalar @addresses, 0, 'the docs name the coordinator and two workers');
$coordinator->safe_psql('postgres', $nodes_sql);
distribute($coordinator);
is($coordinator->safe_psql('postgres',
		"SELECT count(DISTINCT nodeport) FROM pg_dist_shard_placement JOIN pg_dist_shard USING (shardid) WHERE logicalrelid = 'idempotent_record'::regclass"),
	'2', 'the shards of idempotent_record are on the two workers');
is($coordinator->safe_psql('postgres',
		"SELECT string_agg(result, ',') FROM run_command_on_workers('SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()')"),
	't,t', "the coordinator's connections to the workers use TLS");

# five tenants whose shard is on each worker (the fifth of worker 1 for
# the shard move)
my %tenants;    # worker port => [tenants]
foreach my $row (split /\n/, $coordinator->safe_psql('postgres', q{
SELECT p.nodeport, 'tenant_' || g
  FROM generate_series(1, 200) g
  JOIN pg_dist_shard_placement p
    ON p.shardid = get_shard_id_for_distribution_column('idempotent_record', 'tenant_' || g)
 ORDER BY g}))
{
	my ($port, $tenant) = split /\|/, $row;
	my $list = $tenants{$port} //= [];
	push @$list, $tenant if @$list < 5;
}
my @w1 = @{ $tenants{ $workers[0]->port } // [] };
my @w2 = @{ $tenants{ $workers[1]->port } // [] };
ok(@w1 == 5 && @w2 == 5, 'tenants with shards on each worker');

# the scenarios with the client on each node, each run with a tenant of
# each worker
my @runs = ([ 'coordinator', $coordinator ], [ 'worker 1', $workers[0] ], [ 'worker 2', $workers[1] ]);
foreach my $r (0 .. $#runs)
{
	my ($name, $client) = @{ $runs[$r] };
	scenarios("cluster, client on $name", $client, \@nodes, $w1[$r], $w2[$r]);
}

# Purge batches hold whatever plan a shard's node picks.  The issue's plan:
# statistics of the shard taken before a scope grew (as autovacuum takes
# them while a tenant is small) make its planner expect about one row of
# the scope, and a DELETE whose batch was a LIMIT sub-select ran it as the
# inner side of a nested loop, rescanned for every row, each rescan
# skipping the rows deleted so far: idem_purge(100) deleted 999 of 2,000,
# idem_purge(5) 9 of 3 scopes x 20.  So another tenant of the same shard
# has thousands of live records and tokens, the shards are analyzed, and
# only then do the expired scopes appear.
my ($neighbour, @small) = split /,/, $coordinator->safe_psql('postgres', q{
SELECT string_agg(s, ',' ORDER BY g)
  FROM (SELECT g, 'purge_' || g AS s FROM generate_series(1, 2000) g
         WHERE get_shard_id_for_distribution_column('idempotent_record', 'purge_' || g)
             = get_shard_id_for_distribution_column('idempotent_record', 'bigscope')
         ORDER BY g LIMIT 4) x});
is(scalar @small, 3, 'four scopes in the shard of bigscope');
$coordinator->safe_psql('postgres', qq{
SELECT count(*) FROM (SELECT idem_once('live' || g, scope => '$neighbour', ttl => '1 day')
                        FROM generate_series(1, 2000) g) s;
SELECT count(*) FROM (SELECT idem_token_issue('$neighbour', ttl => '1 day') FROM generate_series(1, 2000) g) s;
ANALYZE idempotent_record, idempotency_token;});

# the rows of scope in table that the planner of its shard's node expects
sub shard_estimate
{
	my ($table, $scope) = @_;
	my ($shard, $port) = split /\|/, $coordinator->safe_psql('postgres', qq{
SELECT shardid, nodeport FROM pg_dist_shard_placement
 WHERE shardid = get_shard_id_for_distribution_column('$table', '$scope')});
	my ($node) = grep { $_->port == $port } @nodes;
	my $plan = $node->safe_psql('postgres', "EXPLAIN SELECT * FROM ONLY ${table}_$shard WHERE scope = '$scope'");
	return $plan =~ /rows=(\d+)/ ? $1 : -1;
}

# once the 2,000 rows of scope bigscope in table have expired,
# idem_purge(100) deletes exactly 100 from each node
sub purge_batches_hold
{
	my ($what, $table) = @_;
	$coordinator->poll_query_until('postgres',
		"SELECT count(*) = 2000 FROM $table WHERE scope = 'bigscope' AND expires_at < now()")
	  or die "the $what did not expire";
	my $estimate = shard_estimate($table, 'bigscope');
	ok($estimate >= 0 && $estimate < 20,
		"the statistics of the shard predate the scope: its planner expects $estimate of 2,000 $what");
	foreach my $node (@nodes)
	{
		is($node->safe_psql('postgres', 'SELECT idem_purge(100)'), '100',
			"idem_purge(100) deletes 100 of 2,000 expired $what of a scope, from " . $node->name);
	}
	is($coordinator->safe_psql('postgres', "SELECT count(*) FROM $table WHERE scope = 'bigscope'"),
		'1700', "... 300 $what in all");
	$coordinator->safe_psql('postgres', 'CALL idem_purge_all()');
}
$coordinator->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT idem_once('big' || g, scope => 'bigscope', ttl => '1 second')
                        FROM generate_series(1, 2000) g) s;});
purge_batches_hold('records', 'idempotent_record');
$coordinator->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT idem_token_issue('bigscope', ttl => '1 second') FROM generate_series(1, 2000) g) s;});
purge_batches_hold('tokens', 'idempotency_token');
my $small_in = join(', ', map { "'$_'" } @small);
$coordinator->safe_psql('postgres', qq{
SELECT count(*) FROM (SELECT idem_once('small' || g, scope => s, ttl => '1 second')
                        FROM generate_series(1, 20) g, unnest(ARRAY[$small_in]) s) s;});
$coordinator->poll_query_until('postgres',
	"SELECT count(*) = 60 FROM idempotent_record WHERE scope IN ($small_in) AND expires_at < now()")
  or die 'the records did not expire';
is($workers[0]->safe_psql('postgres', 'SELECT idem_purge(5)'), '5',
	'idem_purge(5) deletes 5 of 3 scopes x 20 expired records');
is($coordinator->safe_psql('postgres', "SELECT count(*) FROM idempotent_record WHERE scope IN ($small_in)"),
	'55', '... and leaves the other 55');
$coordinator->safe_psql('postgres', 'CALL idem_purge_all()');

# wait_for_outcome on one node, the outcome recorded through another: the
# waiter's bound is an hour, its statement_timeout a minute
{
	my $scope = $w1[0];
	$coordinator->safe_psql('postgres', "SELECT idem_claim('wait-1', scope => '$scope', lease => '1 hour')");
	my $waiter = $workers[1]->background_psql('postgres', on_error_stop => 0);
	$waiter->query_safe("SET statement_timeout = '60s'");
	send_query($waiter, "SELECT outcome, result FROM idem_claim('wait-1', scope => '$scope', wait_for_outcome => '1 hour');");
	ok($workers[1]->poll_query_until('postgres',
			"SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Extension' AND query LIKE '%wait-1%'"),
		'a duplicate waits for the outcome on worker 2');
	$workers[0]->safe_psql('postgres', "SELECT idem_finish('wait-1', '{\"w\": 1}', scope => '$scope', fence => 1)");
	is(collect($waiter), 'replay|{"w": 1}',
		'an outcome recorded through worker 1 reaches the waiter on worker 2 before its statement_timeout');
	$waiter->quit;
}

# Delegated mode, by the recipe of docs/citus.md run as printed, with
# grants written before it (copied when the table becomes a reference
# table) and after it (written through Citus): roles without privileges
# on the extension's tables, from every node, for tenants on each worker
$coordinator->safe_psql('postgres', qq{
CREATE ROLE app LOGIN;
CREATE ROLE maint LOGIN;
CREATE ROLE regress_before LOGIN;
CREATE ROLE regress_maint_before LOGIN;
GRANT SELECT, INSERT ON orders TO app, regress_before;
INSERT INTO idem_scope_grant VALUES ('regress_before', '$w1[3]'), ('regress_before', '$w2[3]'),
                                    ('regress_maint_before', '*');});
# the README's step 5 first, as an operator who followed it did: the
# recipe still completes (issue 31: 23505 on ('maint', '*'))
$coordinator->safe_psql('postgres', $readme_grants);
my ($recipe_rc, $recipe_out, $recipe_err) = psql_verbose($coordinator, $doc_recipe);
is($recipe_rc, 0, 'the least-privilege recipe completes after README step 5')
  or diag $recipe_err;
like($recipe_err, qr/HINT:  To remove the local data, run: SELECT truncate_local_data_after_distributing_table/,
	"... with Citus's NOTICE that docs/citus.md quotes");
foreach my $node (@nodes)
{
	is($node->safe_psql('postgres',
			"SELECT string_agg(grantee || ' ' || pattern, ', ' ORDER BY grantee, pattern) FROM idem_scope_grant WHERE grantee IN ('app', 'maint')"),
		'app {app.tenant}, maint *',
		'the recipe leaves app and maint exactly the grants it documents, on ' . $node->name);
	like(sql_error($node, "SET ROLE app; SELECT idem_lookup('k', '$w1[0]')"), qr/42501/,
		'app no longer reaches a tenant it did not name (step 5\'s \'*\' is gone), on ' . $node->name);
	is($node->safe_psql('postgres', "SELECT pg_relation_size('idem_scope_grant')"), '0',
		'no grant stays in the local (shell) table of idem_scope_grant on ' . $node->name);
}
$coordinator->safe_psql('postgres',
	"SELECT run_command_on_all_nodes('GRANT SELECT ON idem_pending TO regress_maint_before')");
$coordinator->safe_psql('postgres', qq{
CREATE ROLE regress_after LOGIN;
GRANT SELECT, INSERT ON orders TO regress_after;
INSERT INTO idem_scope_grant VALUES ('regress_after', '$w1[3]'), ('regress_after', '$w2[3]');});
my $n = 100;
foreach my $r (@runs)
{
	my ($from, $client) = @$r;
	foreach my $scope ($w1[3], $w2[3])
	{
		my $held = $scope eq $w1[3] ? 'worker 1' : 'worker 2';
		foreach my $who ([ 'regress_before', '' ], [ 'regress_after', '' ],
			[ 'app', "SET LOCAL app.tenant = '$scope';" ])
		{
			my ($role, $set) = @$who;
			$n++;
			is(answer($client, qq{
SET ROLE $role;
BEGIN;
$set
SELECT outcome FROM idem_claim('del-$n', scope => '$scope');
INSERT INTO orders (tenant, id) VALUES ('$scope', $n);
SELECT idem_finish('del-$n', '{"n": $n}', scope => '$scope');
COMMIT;
BEGIN;
$set
SELECT outcome || ' ' || (result ->> 'n') FROM idem_claim('del-$n', scope => '$scope');
COMMIT;}),
				"claimed\n\nreplay $n",
				"delegated mode, $role from $from, shard on $held: claim, business row and outcome commit together, then replay");
		}
	}
	like(sql_error($client, "SET ROLE regress_after; SELECT idem_claim('del', scope => 'tenant_not_granted')"),
		qr/42501/, "delegated mode from $from: a scope not granted is refused (42501)");

	# a leased claim as app ({app.tenant}), as docs/citus.md prints it
	# (issue 31: no form that works was documented; SET LOCAL in a
	# transaction gives 25001, set_config in a statement of its own 42501)
	foreach my $scope ($w1[3], $w2[3])
	{
		$n++;
		(my $leased = $doc_leased) =~ s/acct_42/$scope/g;
		$leased =~ s/pay-1/lease-$n/g;
		$leased =~ s/1001/$n/g;
		$leased =~ s/'30 seconds'/'1 hour'/g;    # alive however slow the machine
		like(answer($client, "SET ROLE app;\n$leased"), qr/\Aclaimed\|1\n/,
			"leased claim as app from $from, shard on " . ($scope eq $w1[3] ? 'worker 1' : 'worker 2')
			  . ': the documented form claims, checkpoints and finishes');
		is($coordinator->safe_psql('postgres', qq{
SELECT status || ' ' || fence || ' ' || recovery_point || ' ' || (result ->> 'order_id')
  FROM idem_lookup('lease-$n', '$scope');
SELECT count(*) FROM orders WHERE tenant = '$scope' AND id = $n;}),
			"succeeded 1 charged $n\n1", '... and its outcome and business row are recorded');
	}
	like(sql_error($client, "SET ROLE app; BEGIN; SET LOCAL app.tenant = '$w1[3]'; SELECT idem_claim('lease-tx', scope => '$w1[3]', lease => '1 hour')"),
		qr/25001/, "leased claim as app from $from: inside a transaction block it is refused (25001), as documented");
	like(sql_error($client, "SET ROLE app; BEGIN; SET LOCAL app.tenant = '$w1[3]'; SELECT idem_claim('del', scope => '$w2[3]')"),
		qr/42501/, "delegated mode from $from: a {setting} grant is refused for another tenant (42501)");

	# the commit guard from every node, in delegated mode
	foreach my $scope ($w1[3], $w2[3])
	{
		my $err = sql_error($client, qq{
SET ROLE regress_after;
BEGIN;
SELECT idem_claim('guarded-del', scope => '$scope');
INSERT INTO orders (tenant, id) VALUES ('$scope', 99);
COMMIT;});
		like($err, qr/ERROR:  IK004: cannot commit a transaction with an unfinished idempotency claim/,
			"delegated mode from $from, shard on " . ($scope eq $w1[3] ? 'worker 1' : 'worker 2')
			  . ': a commit without an outcome raises IK004');
		is($coordinator->safe_psql('postgres', qq{
SELECT (SELECT count(*) FROM orders WHERE tenant = '$scope' AND id = 99)
     + (SELECT count(*) FROM idempotent_record WHERE scope = '$scope' AND key = 'guarded-del')}),
			'0', "delegated mode from $from: ... and neither the claim nor the business row committed");
	}
}
is($coordinator->safe_psql('postgres', "SELECT count(*) FROM orders WHERE id > 100 AND id <= $n"), $n - 100,
	'delegated mode: one business row per request');

# idempotency_cluster_stats(): the whole cluster's counters, read from any
# node (issue 31: 20 claims through the coordinator showed 0 in its
# idempotency_stats, 10 in each worker's: a delegated call counts on the
# node that holds its shard), and the exporter example on Citus, which
# reads it instead of the view as docs/citus.md says
{
	my $claims = sub {
		my ($node, $from) = @_;
		return $node->safe_psql('postgres', "SELECT claims FROM $from");
	};
	my %cluster = map { $_->name => $claims->($_, 'idempotency_cluster_stats()') } @nodes;
	my %local   = map { $_->name => $claims->($_, 'idempotency_stats') } @nodes;
	$coordinator->safe_psql('postgres',
		join('', map { "SELECT idem_once('cstat-$_', scope => '" . ($_ % 2 ? $w1[0] : $w2[0]) . "');\n" } 1 .. 20));
	is(sum(map { $claims->($_, 'idempotency_stats') - $local{ $_->name } } @nodes), 20,
		'cluster stats: 20 claims through the coordinator are counted once, on some node');
	my ($yaml_query) = slurp_file("$ENV{TESTDIR}/examples/postgres_exporter_queries.yaml") =~ /^  query: \|\n(.*?)\n  metrics:/ms;
	(my $citus_query = $yaml_query) =~ s/^    //mg;
	like(slurp_file("$ENV{TESTDIR}/docs/citus.md"),
		qr{sed 's/FROM idempotency_stats\$/FROM idempotency_cluster_stats\(\)/' examples/postgres_exporter_queries.yaml},
		'docs/citus.md: the exporter example on Citus reads idempotency_cluster_stats(), by this substitution');
	$citus_query =~ s/FROM idempotency_stats$/FROM idempotency_cluster_stats()/m
	  or die 'the exporter query reads no idempotency_stats';
	foreach my $node (@nodes)
	{
		is($claims->($node, 'idempotency_cluster_stats()') - $cluster{ $node->name }, 20,
			'cluster stats: idempotency_cluster_stats() on ' . $node->name . ' counts all 20');
		is($node->safe_psql('postgres', 'SELECT nodes FROM idempotency_cluster_stats()'), '3',
			'... from the 3 nodes');
		is($node->safe_psql('postgres', "SELECT claims_total FROM ($citus_query) q"),
			$claims->($node, 'idempotency_cluster_stats()'),
			'the exporter query on Citus, on ' . $node->name . ', exports the cluster total');
	}
}

# idem_pending as maint (grant '*' written after the recipe) and as
# regress_maint_before (written before it): from every node, what a
# superuser sees, not fewer rows without an error
foreach my $i (1 .. 4)
{
	my $scope = $i % 2 ? $w1[$i - 1] : $w2[$i - 1];
	$coordinator->safe_psql('postgres', qq{
SELECT idem_claim('recon-$i', scope => '$scope', lease => '1 hour');
SELECT idem_mark_unknown('recon-$i', '{}', scope => '$scope', fence => 1);});
}
my $pending = 'SELECT string_agg(scope || \'/\' || key, \',\') FROM idem_pending';
my $all_pending = $coordinator->safe_psql('postgres', $pending);
like($all_pending, qr/recon-4/, 'idem_pending lists the unknown outcomes');
foreach my $node (@nodes)
{
	is(answer($node, "SET ROLE maint; $pending"), $all_pending,
		'idem_pending as maint on ' . $node->name . ' equals the superuser view');
	is(answer($node, "SET ROLE regress_maint_before; $pending"), $all_pending,
		'idem_pending as a role granted before the recipe on ' . $node->name . ' equals the superuser view');
	is(answer($node, 'SET ROLE maint; SELECT idem_purge(10) >= 0'), 't',
		'maint may purge on ' . $node->name);
}

# a grant removed on the coordinator is gone on every node at commit
$coordinator->safe_psql('postgres', "DELETE FROM idem_scope_grant WHERE grantee = 'regress_after' AND pattern = '$w2[3]'");
foreach my $node (@nodes)
{
	like(sql_error($node, "SET ROLE regress_after; SELECT idem_lookup('del-101', '$w2[3]')"),
		qr/42501/, 'a grant removed on the coordinator is refused on ' . $node->name . ' at once');
}

# Shard-group moves (examples/citus_move_tenant.sh: worker 1 > 2 > 1 > 2,
# then back to 1 through the deadlock below) while clients claim on
# the moving tenant from all three nodes, as the application role through
# the delegated functions.  Each client sends one request at a time and
# takes it as acknowledged when its COMMIT returned without error; a
# request that failed is sent again with the same key, as a client does.
# The moves are run as docs/citus.md prints them, with the default
# shard_transfer_mode ('auto'), which replicates logically since every
# co-located table has a primary key: writes go on while the shard group
# is copied, and the new placements must have all of them.  A transaction
# that holds the tenant's rows when the move starts keeps it waiting (the
# logical replication slot on the source waits for every transaction open
# there, which also shows that the move replicates logically): that is
# when the clients' requests are answered during the move, whatever the
# machine's speed.  The sessions are pumped
# by the test between requests and have their own bound each
# ($PostgreSQL::Test::Utils::timeout_default): no session of the test
# stays in a transaction the move waits for while the test waits for the
# move.  Citus's distributed deadlock detection may cancel the move or a
# client's transaction (a transaction whose delegated call holds the
# shard's metadata lock on the source, then waits for the move's lock on
# its own node, while the move waits for it): the script starts the move
# again, the client retries.  So is a request
# that Citus ran by the placement of before the move (XX000 cannot execute
# a distributed query from a query on a shard, 25001 cannot perform query
# on placements that were modified in this transaction by a different
# user).
{
	my $scope = $w1[4];
	my $shard = $coordinator->safe_psql('postgres',
		"SELECT get_shard_id_for_distribution_column('idempotent_record', '$scope')");
	my $timeout = $PostgreSQL::Test::Utils::timeout_default;
	my $session = sub {
		my ($node) = @_;
		my $psql = $node->background_psql('postgres', on_error_stop => 0, timeout => $timeout);
		$psql->set_query_timer_restart;
		$psql->query_safe('\\set VERBOSITY verbose');    # errors with their SQLSTATE
		$psql->query_safe('SET ROLE app');
		return $psql;
	};
	my @clients = map { { name => $_->name, psql => $session->($_), acks => 0 } } @nodes;
	my (%acked, %errors, $requests, $replays, $during);
	my $last_id = 0;
	my $draining = 0;    # no new keys, only retries

	# one request of client c: its unacknowledged key again, or a new one
	my $send = sub {
		my ($c) = @_;
		if (!defined $c->{key})
		{
			return 0 if $draining;
			$last_id++;
			@$c{qw(key id tries)} = ("mv-$last_id", 1_000_000 + $last_id, 0);
		}
		$c->{tries}++;
		$requests++;
		my ($k, $n) = @$c{qw(key id)};
		send_query($c->{psql}, qq{\\set LAST_ERROR_SQLSTATE none
\\unset claimed
\\unset outcome
\\unset result
BEGIN;
SET LOCAL app.tenant = '$scope';
SELECT outcome = 'claimed' AS claimed, outcome, result FROM idem_claim('$k', scope => '$scope') \\gset
\\if :{?claimed}
\\if :claimed
INSERT INTO orders (tenant, id) VALUES ('$scope', $n);
SELECT idem_finish('$k', '{"id": $n}', scope => '$scope') \\gset
\\endif
\\endif
COMMIT;
\\echo __answer__ :LAST_ERROR_SQLSTATE :outcome :result
\\warn __answered__});
		return 1;
	};
	# its answer: acknowledged (claimed, or a replay of an earlier try that
	# committed), or an error to retry
	my $answer = sub {
		my ($c) = @_;
		my $out = collect($c->{psql});
		my ($state, $outcome, $result) = $out =~ /^__answer__ (\S+) (\S+) (.*)$/m
		  or die "no answer from $c->{name}: $out";
		# the request's errors, all of them: the first one says why
		pump_until($c->{psql}{run}, $c->{psql}{timeout}, \$c->{psql}{stderr}, qr/__answered__\n/)
		  or die "no end of the errors of $c->{name}";
		my ($first) = $c->{psql}{stderr} =~ /ERROR:  ([0-9A-Z]{5}):/;
		if ($state eq 'none' && ($outcome eq 'claimed' || $outcome eq 'replay'))
		{
			$acked{ $c->{key} } = $outcome eq 'claimed' ? qq({"id": $c->{id}}) : $result;
			$replays++ if $outcome eq 'replay';
			$c->{acks}++;
			$c->{key} = undef;
		}
		else
		{
			# what a client retries with the same key: a deadlock, a
			# serialization failure, a lost connection, Citus's errors
			# around a move (docs/citus.md)
			$first //= $state;
			die "request $c->{key} on $c->{name} failed ($first), not to be retried: $c->{psql}{stderr}"
			  unless $first =~ /^(40P01|40001|08006|XX000|25001)$/;
			$errors{$first}++;
			diag "request $c->{key} on $c->{name}: $first, retried: $c->{psql}{stderr}";
			die "request $c->{key} failed $c->{tries} times" if $c->{tries} >= 20;
		}
		$c->{psql}{stderr} = '';
	};
	my $round = sub {
		my @sent = grep { $send->($_) } @clients;
		$answer->($_) foreach @sent;
		return scalar @sent;
	};

	# the load is on: every client acknowledged
	$round->() while grep { $_->{acks} < 2 } @clients;

	# a request in flight when the move starts
	my $held = $session->($coordinator);
	$held->query_safe("BEGIN; SET LOCAL app.tenant = '$scope'");
	is($held->query_safe("SELECT outcome FROM idem_claim('mv-held', scope => '$scope')"),
		'claimed', 'shard move: a claim in flight when the move starts');
	$held->query_safe("INSERT INTO orders (tenant, id) VALUES ('$scope', 999999)");

	# A move by examples/citus_move_tenant.sh, as docs/citus.md prints it:
	# the script starts the move again when Citus cancels it as a deadlock
	# victim (40P01), at most 10 times.  It runs in a process of its own,
	# its output in a file; its answer so far: '' while it runs, else its
	# output.
	my ($mover, $mv_out, $deadline, %attempts, $moves);
	my $move = sub {
		my ($to, @options) = @_;
		$moves++;
		my $log = "$PostgreSQL::Test::Utils::tmp_check/move-$moves.log";
		$mv_out = undef;
		$deadline = IPC::Run::timer(10 * $timeout);
		$deadline->start;
		$mover = fork() // die "fork: $!";
		if ($mover == 0)
		{
			# the child only runs the script (no die: it would run the
			# test's END blocks, which stop the nodes)
			open(STDIN, '<', '/dev/null') && open(STDOUT, '>', $log) && open(STDERR, '>&', \*STDOUT)
			  && exec('env', 'PGHOST=' . $coordinator->host, 'PGPORT=' . $coordinator->port,
				'PGDATABASE=postgres', @options,
				'bash', "$ENV{TESTDIR}/examples/citus_move_tenant.sh", $scope, '127.0.0.1', $to->port);
			POSIX::_exit(127);
		}
		$mover = [ $mover, $log ];
	};
	my $move_answer = sub {
		return $mv_out if defined $mv_out;
		return '' if waitpid($mover->[0], WNOHANG) == 0;
		return $mv_out = slurp_file($mover->[1]);
	};
	# claims go on until the move answers
	my $move_done = sub {
		my ($to, $what) = @_;
		while ($move_answer->() eq '')
		{
			die "the move did not answer within 10 x $timeout seconds" if $deadline->is_expired;
			$round->();
		}
		my $tries = () = $mv_out =~ /^attempt \d+:/mg;
		my $victims = () = $mv_out =~ /deadlock victim/g;
		$attempts{$what} = $tries;
		$errors{'move 40P01'} += $victims if $victims;
		diag "shard move $what: $mv_out";
		like($mv_out, qr/^attempt \d+: moved shard \d+ of \S+ from \S+ to 127\.0\.0\.1:${\ $to->port}\n\z/m,
			"shard move $what: examples/citus_move_tenant.sh moved the tenant");
		is(shard_port($coordinator, $scope), $to->port, "shard move $what: the tenant's shard group is there");
	};
	$move->($workers[1]);
	ok($workers[0]->poll_query_until('postgres',
			"SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'transactionid'"),
		'shard move: the move waits on worker 1 for the transaction in flight');
	my %before = map { $_->{name} => $_->{acks} } @clients;
	$round->() foreach 1 .. 3;
	$during = grep { $_->{acks} > $before{ $_->{name} } } @clients;
	is($move_answer->(), '', 'shard move: ... and is still running');
	$held->query_safe("SELECT idem_finish('mv-held', '{\"id\": 999999}', scope => '$scope')");
	$held->query_safe('COMMIT');
	$held->quit;
	$acked{'mv-held'} = '{"id": 999999}';
	$move_done->($workers[1], 'worker 1 > worker 2');
	# and back and forth under the same load
	$round->() while grep { $_->{acks} < 2 } @clients;
	$move->($workers[0]);
	$move_done->($workers[0], 'worker 2 > worker 1');
	$move->($workers[1]);
	$move_done->($workers[1], 'worker 1 > worker 2 again');

	# The lock cycle, step by step.  Citus's test switch
	# citus.running_under_citus_test_suite makes the move take a share of
	# advisory lock (44000, 55152) right before it blocks writes, so a
	# session holding that lock stops it there, holding no lock of the
	# shards, after the copy.  Then: a request on the coordinator claims
	# (delegated: the claim runs on worker 2, the source, and holds the
	# shard's metadata lock there); the move goes on and blocks writes, an
	# ExclusiveLock of the shards' metadata on every node at once: granted
	# on the coordinator and worker 1, waiting on worker 2 for the
	# request; the request's next statement, its business row, is planned
	# on the coordinator and waits there for the move.  A distributed
	# deadlock that neither side can avoid: Citus's detection cancels one
	# (the younger distributed transaction), and the script starts a
	# cancelled move again.
	{
		my $gate = $coordinator->background_psql('postgres');
		$gate->query_safe('SELECT pg_advisory_lock(44000, 55152)');
		$move->($workers[0], 'PGOPTIONS=-c citus.running_under_citus_test_suite=on');
		ok($coordinator->poll_query_until('postgres', q{
SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
   AND classid = 44000 AND objid = 55152}),
			'cycle: the move copied the shards and waits at the gate, before it blocks writes');
		my $t = $session->($coordinator);
		$t->query_safe("BEGIN; SET LOCAL app.tenant = '$scope'");
		is($t->query_safe("SELECT outcome FROM idem_claim('mv-cycle', scope => '$scope')"),
			'claimed', 'cycle: a request claims (delegated to worker 2, the source)');
		$gate->query_safe('SELECT pg_advisory_unlock(44000, 55152)');
		$gate->quit;
		# the move's lock waits on worker 2 for the request's
		ok($coordinator->poll_query_until('postgres', q{
SELECT count(*) > 0 FROM citus_lock_waits
 WHERE blocked_statement LIKE '%citus_move_shard_placement%'
   AND current_statement_in_blocking_process LIKE '%mv-cycle%'}),
			'cycle: the move waits on worker 2 for the metadata lock the delegated claim holds');
		diag "cycle, after the claim:\n" . $coordinator->safe_psql('postgres', q{
SELECT format('%s on node %s waits for %s on node %s: %s / blocking: %s', waiting_gpid, waiting_nodeid, blocking_gpid,
              blocking_nodeid, left(blocked_statement, 80), left(current_statement_in_blocking_process, 120))
  FROM citus_lock_waits});
		$t->{stderr} = '';
		send_query($t, "\\set LAST_ERROR_SQLSTATE none\nINSERT INTO orders (tenant, id) VALUES ('$scope', 888888);\n\\echo __inserted__ :LAST_ERROR_SQLSTATE");
		while ($move_answer->() eq '' && $t->{stdout} !~ /__inserted__/)
		{
			die 'the cycle did not end' if $deadline->is_expired;
			$t->{run}->pump_nb;
			select(undef, undef, undef, 0.1);
		}
		my $inserted = collect($t);
		my ($state) = $inserted =~ /__inserted__ (\S+)/;
		my $request_victim = $state eq '40P01' ? 1 : 0;
		# the request went on, so the move let go: the script says why
		my $move_victim = 0;
		if (!$request_victim)
		{
			foreach my $try (1 .. 10 * $timeout)
			{
				last if ($move_victim = slurp_file($mover->[1]) =~ /deadlock victim/ ? 1 : 0)
				  || $move_answer->() ne '';
				select(undef, undef, undef, 0.1);
			}
		}
		diag "cycle, the request's INSERT: $state; the move so far: " . slurp_file($mover->[1]);
		is($move_victim + $request_victim, 1,
			'cycle: a distributed deadlock; Citus cancels one side, the move or the request');
		if ($request_victim)
		{
			$t->query_safe('ROLLBACK');
		}
		else
		{
			$t->query_safe("SELECT idem_finish('mv-cycle', '{\"id\": 888888}', scope => '$scope')");
			$t->query_safe('COMMIT');
			$acked{'mv-cycle'} = '{"id": 888888}';
		}
		$t->quit;
		$move_done->($workers[0], 'worker 2 > worker 1 through the cycle');
		$errors{'cycle: request 40P01'} += $request_victim;
	}

	# more claims after the move, then every failed request again until
	# acknowledged
	$_->{acks} = 0 foreach @clients;
	$round->() while grep { $_->{acks} < 2 } @clients;
	$draining = 1;
	1 while $round->();
	$_->{psql}->quit foreach @clients;

	is($during, 3, 'shard move: every node answered requests while the move ran');
	is_deeply(
		{ map { split /\|/, $_, 2 } split /\n/, $coordinator->safe_psql('postgres', qq{
SELECT key || '|' || result::text FROM idempotent_record
 WHERE scope = '$scope' AND key LIKE 'mv-%' AND status = 'succeeded'}) },
		\%acked, 'shard move: every acknowledged outcome is recorded unchanged, and no other');
	is_deeply(
		[ split /\n/, $coordinator->safe_psql('postgres', "SELECT id FROM orders WHERE tenant = '$scope' ORDER BY id") ],
		[ sort { $a <=> $b } map { $acked{$_} =~ /(\d+)/ } keys %acked ],
		'shard move: one order per acknowledged key, and no other');
	diag sprintf('shard moves: %d requests from 3 nodes, %d keys acknowledged (%d replays), attempts per move: %s, errors: %s',
		$requests, scalar keys %acked, $replays // 0, join(', ', map { "$_: $attempts{$_}" } sort keys %attempts),
		join(', ', map { "$_ x $errors{$_}" } sort keys %errors) || 'none');
}

# The node the client is connected to dies during COMMIT (issue 31: the
# docs said of 08006 "nothing of it committed").  Worker 2 holds the
# tenant's shard and the client's connection; its commit waits for a
# synchronous standby that does not exist, so the commit record is written
# and the client has no answer yet; then the node stops (immediate).  The
# client sees its connection fail; the request committed all the same,
# and its retry with the same key replays it.
{
	my $scope = $w2[2];
	my $w2 = $workers[1];
	$w2->append_conf('postgresql.conf', "synchronous_standby_names = 'nobody'");
	$w2->reload;
	my ($in, $out, $err) = ('', '', '');
	my $client = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $w2->connstr('postgres'), '-c', qq{
BEGIN;
SELECT outcome FROM idem_claim('commit-dies', scope => '$scope');
INSERT INTO orders (tenant, id) VALUES ('$scope', 777);
SELECT idem_finish('commit-dies', '{"id": 777}', scope => '$scope');
COMMIT;} ],
		'<', \$in, '>', \$out, '2>', \$err);
	ok($w2->poll_query_until('postgres',
			"SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event = 'SyncRep'"),
		'node dies at COMMIT: the commit record is written, the client has no answer yet');
	$w2->stop('immediate');
	$client->finish;
	like($err, qr/server closed the connection unexpectedly|connection to server .* lost/,
		'... the client sees its connection fail');
	unlike(slurp_file("$ENV{TESTDIR}/docs/citus.md"), qr/`08006` \(connection\s+failure\) during a request: nothing of it committed/,
		'docs/citus.md no longer says that nothing of a request committed on 08006');
	like(sql_error($coordinator, 'SELECT claims FROM idempotency_cluster_stats()'),
		qr/08000: could not read the idempotency counters of node 127\.0\.0\.1:${\ $w2->port}/,
		'cluster stats with a node down: an error naming the node, not a smaller total');
	$w2->adjust_conf('postgresql.conf', 'synchronous_standby_names', "''");
	$w2->start;
	is($coordinator->safe_psql('postgres', qq{
SELECT outcome || ' ' || result::text FROM idem_claim('commit-dies', scope => '$scope');
SELECT count(*) FROM orders WHERE tenant = '$scope' AND id = 777;}),
		qq{replay {"id": 777}\n1},
		'... yet the request committed (not "nothing of it committed"): its retry with the same key replays it');
}

# nothing in any shell table
foreach my $node (@nodes)
{
	is($node->safe_psql('postgres',
			"SELECT pg_relation_size('idempotent_record') + pg_relation_size('idempotency_token')"),
		'0', 'after all: no record or token in the shell tables of ' . $node->name);
}
$_->stop foreach @nodes;

# 3. preloaded before citus, the server does not start
my $wrong = citus_node('citus_wrong_order', 'idempotency,citus');
my $started = $wrong->start(fail_ok => 1);
ok(!$started, 'the server refuses to start with idempotency preloaded before citus');
like(slurp_file($wrong->logfile), qr/idempotency must be preloaded after citus/,
	'... and says why');

done_testing();
