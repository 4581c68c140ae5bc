# The direct heap/index path skips the executor, so it must not serve
# where the executor's permission hook has to see each access: with pgaudit
# loaded, object audit logging of the record table logs every write that
# claims, outcomes and purge make.  A hook that only watches executor runs
# (pg_stat_statements) leaves the direct path on, which pg_stat_statements
# itself shows: with track = all it lists the extension's own statements
# only where planned SQL served.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use IdemTest;

# one request of each kind: in-transaction claim and finish, leased claim
# and finish, a replay, and a purge of two expired records
my $requests = q{
BEGIN;
SELECT outcome FROM idem_claim('t1');
SELECT idem_finish('t1', '{"n": 1}');
COMMIT;
SELECT outcome FROM idem_claim('l1', lease => '1 minute');
SELECT idem_finish('l1', '{"n": 2}', fence => 1);
SELECT outcome FROM idem_claim('t1');
UPDATE idempotent_record SET expires_at = now() - interval '1 second',
                             created_at = now() - interval '2 seconds',
                             updated_at = now() - interval '2 seconds';
SELECT idem_purge(10);
};

# a cluster for each library that hooks the executor, preloaded before the
# extension
my ($audited, $counted) = map {
	my ($library, $conf) = @$_;
	idem_node($library, preload => [ $library, 'idempotency' ], conf => $conf,
		extensions => [$library]);
} ([ 'pgaudit', "pgaudit.role = 'regress_auditor'\npgaudit.log_parameter = off\n" ],
   [ 'pg_stat_statements', "pg_stat_statements.track = all\n" ]);

###############################################################################
# pgaudit: object audit log of idempotent_record
###############################################################################
$audited->safe_psql('postgres', q{
CREATE ROLE regress_auditor NOLOGIN;
GRANT INSERT, UPDATE, DELETE ON idempotent_record TO regress_auditor;
});
my $log_start = -s $audited->logfile;
is($audited->safe_psql('postgres', $requests), "claimed\n\nclaimed\n\nreplay\n2",
	'requests answered as usual with pgaudit loaded');
my $log = slurp_file($audited->logfile, $log_start);
my %writes;
$writes{$1}++ while $log =~ /AUDIT: OBJECT,\d+,\d+,WRITE,(INSERT|UPDATE|DELETE),TABLE,public\.idempotent_record,/g;
is($writes{INSERT} // 0, 2, 'both claims are in the object audit log as INSERT');
# the two outcomes, and the test's own UPDATE that expires the records
is($writes{UPDATE} // 0, 3, 'both outcomes are in the object audit log as UPDATE');
is($writes{DELETE} // 0, 1, 'the purge is in the object audit log as DELETE');
$audited->stop;

###############################################################################
# pg_stat_statements: the direct path stays on
###############################################################################
# how many of the extension's statements (planned SQL on the record table)
# ran since the last call
sub extension_statements
{
	my ($setting) = @_;
	return $counted->safe_psql('postgres', qq{
SET idempotency.direct_access = $setting;
SELECT pg_stat_statements_reset();
TRUNCATE idempotent_record;
$requests
SELECT count(*) FROM pg_stat_statements
 WHERE query ~ 'idempotent_record' AND query ~ '^(INSERT INTO|UPDATE|DELETE FROM|SELECT status|WITH batch)'
   AND query !~ 'expires_at = now\\(\\)';
});
}
my @lines = split /\n/, extension_statements('on');
is($lines[-1], 0, 'with pg_stat_statements loaded the direct path serves claims, outcomes and purge');
@lines = split /\n/, extension_statements('off');
cmp_ok($lines[-1], '>=', 4, '... where idempotency.direct_access = off makes them planned SQL');

# per table: an inheritance child leaves the table to planned SQL
$counted->safe_psql('postgres', 'CREATE TABLE regress_archive () INHERITS (idempotent_record)');
@lines = split /\n/, extension_statements('on');
cmp_ok($lines[-1], '>=', 4, 'a record table with an inheritance child is served by planned SQL');
$counted->stop;

done_testing();
