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
# delegated mode (grants written before and after the recipe, {setting}
# grants, idem_pending as the maintenance role from every node), and that
# no record or token ever lands in the local (shell) table of any node.  Also: the server refuses to start
# with idempotency preloaded before citus.
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
	[ 'postgresql.conf of every node', 'on each worker', ('on the coordinator') x 5 ],
	'docs/citus.md has the marked blocks: settings, nodes, distribution, tenant table, guard, least privilege');
my ($doc_conf, $doc_worker, $doc_nodes, $doc_distribute, $doc_orders, $doc_guard, $doc_recipe) =
  map { $_->[1] } @doc_blocks;

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
$coordinator->safe_psql('postgres', $doc_recipe);
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

# A shard-group move (citus_move_shard_placement) while clients claim on
# the moving tenant from all three nodes, as the application role through
# the delegated functions.  Each client sends one request at a time and
# takes it as acknowledged when its COMMIT returned without error; a
# request that failed is sent again with the same key, as a client does.
# The move is called as docs/citus.md prints it, with the default
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
# shard's rows on the source, then waits for the move's lock on its own
# node, while the move waits for it): both are retried.  So is a request
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

	my $mover = $coordinator->background_psql('postgres', on_error_stop => 0, timeout => $timeout);
	my ($moves, $moved) = (0, '');
	my $deadline;
	my $move = sub {
		$moves++;
		$deadline = IPC::Run::timer($timeout);
		$deadline->start;
		send_query($mover, qq{\\set LAST_ERROR_SQLSTATE none
SELECT citus_move_shard_placement($shard, '127.0.0.1', } . $workers[0]->port . q{, '127.0.0.1', }
			  . $workers[1]->port . qq{);
\\echo __moved__ :LAST_ERROR_SQLSTATE});
	};
	# the move's answer so far: '' while it runs, else its SQLSTATE ('none')
	my $move_answer = sub {
		$mover->{run}->pump_nb;
		return $mover->{stdout} =~ /__moved__ (\S+)/ ? $1 : '';
	};
	$move->();
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

	# claims go on until the move answers; a move chosen as a deadlock
	# victim starts again
	while (1)
	{
		my $state = $move_answer->();
		if ($state eq '')
		{
			die "the move did not answer within $timeout seconds" if $deadline->is_expired;
			$round->();
			next;
		}
		if ($state ne 'none')
		{
			$errors{"move $state"}++;
			diag "shard move: $state $mover->{stderr}";
		}
		$mover->{stdout} = $mover->{stderr} = '';
		if ($state eq '40P01' && $moves < 10)
		{
			$move->();
			next;
		}
		$moved = $state;
		last;
	}
	$mover->quit;
	is($moved, 'none', 'shard move: citus_move_shard_placement succeeded');
	is(shard_port($coordinator, $scope), $workers[1]->port, "shard move: the tenant's shard group is on worker 2");

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
	diag sprintf('shard move: %d requests from 3 nodes, %d keys acknowledged (%d replays), %d move attempt(s), errors: %s',
		$requests, scalar keys %acked, $replays // 0, $moves,
		join(', ', map { "$_ x $errors{$_}" } sort keys %errors) || 'none');
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
