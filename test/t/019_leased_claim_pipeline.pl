# A leased claim in a pipeline (extended query protocol, several queries
# before one Sync: one implicit transaction; pgbench's \startpipeline).
# README "idem_claim": first in the pipeline it commits as soon as it has
# run, so a later query of the pipeline that fails cannot take it back;
# after another query of the pipeline it is refused with 25001 and writes
# nothing.  psql 15 has no pipeline mode, hence pgbench here.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use FindBin;
use lib $FindBin::RealBin;
use IdemTest;

my $node = idem_node('leased_claim_pipeline');

# one pgbench transaction of the given script; returns its stderr
sub pipeline
{
	my ($name, $script) = @_;
	my $file = "$PostgreSQL::Test::Utils::tmp_check/$name.pgbench";
	open my $fh, '>', $file or die $!;
	print $fh $script;
	close $fh;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'pgbench', '-n', '-t', '1', '-M', 'extended', '-f', $file,
			'-h', $node->host, '-p', $node->port, 'postgres' ],
		'>', \$out, '2>', \$err);
	return $err;
}

sub record_of
{
	return $node->safe_psql('postgres',
		"SELECT status || ' ' || fence FROM idempotent_record WHERE key = '$_[0]'");
}

# the claim first, then a query that fails: the claim stays committed
my $err = pipeline('claim_then_failure', q{\startpipeline
SELECT outcome FROM idem_claim('pipe-first', lease => '1 hour');
SELECT 1 / 0;
\endpipeline
});
like($err, qr/division by zero/, 'the second query of the pipeline fails');
is(record_of('pipe-first'), 'in_progress 1',
	'a leased claim first in a pipeline committed as soon as it had run');
is($node->safe_psql('postgres', "SELECT outcome FROM idem_claim('pipe-first')"),
	'in_progress', '... so a duplicate finds the key held by its lease');

# another query first: the leased claim is refused, nothing written
$err = pipeline('query_then_claim', q{\startpipeline
SELECT 1;
SELECT outcome FROM idem_claim('pipe-second', lease => '1 hour');
\endpipeline
});
like($err, qr/leased claim cannot run inside a transaction block/,
	'a leased claim after another query of the pipeline is refused');
is(record_of('pipe-second'), '', '... and writes nothing');

# an in-transaction claim in a pipeline belongs to the pipeline's
# transaction, as in a transaction block
$err = pipeline('in_transaction_claim', q{\startpipeline
SELECT 1;
SELECT outcome FROM idem_claim('pipe-in-tx');
SELECT idem_finish('pipe-in-tx', '{"ok": true}');
\endpipeline
});
is($err, '', 'an in-transaction claim and its finish in a pipeline');
is(record_of('pipe-in-tx'), 'succeeded 1', '... commit together');

$node->stop;
done_testing();
