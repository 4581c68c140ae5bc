# Randomized model test (DESIGN §3, README "Writes after a claim"): three
# sessions issue random sequences of claim (in-transaction or leased, wait
# or not, with or without a fingerprint), finish, fail (retryable or
# final), mark_unknown, checkpoint, extend_lease, lookup, BEGIN, COMMIT,
# ROLLBACK, SAVEPOINT, ROLLBACK TO, RELEASE, with fences that are right,
# missing, stale or from the future; a fourth connection ends leases and
# retention periods (by moving locked_until or expires_at into the past)
# between them.  A reference model written here in Perl predicts every
# answer (outcome, status, result, fence, recovery point, retry hint, or
# the SQLSTATE) and, after every step, the committed table.
#
# Deterministic given the seed: one random generator chooses the steps and
# the session that runs each; a step never waits for another session (the
# model knows which rows each open transaction has written, and only a
# claim with wait => false or a read goes near them).  On a divergence the
# test replays shorter and shorter subsequences on a fresh table and prints
# the seed and the shortest sequence that still diverges.  Two sessions
# use the direct heap/index path and the third the planned SQL
# (idempotency.direct_access), so both meet on the same keys.
#
#   IDEM_MODEL_SEED=n   repeat a run     IDEM_MODEL_OPS=n   its length
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time);

my $seed = $ENV{IDEM_MODEL_SEED} // int(rand(2**31));
my $n_ops = $ENV{IDEM_MODEL_OPS} // 20_000;
my $n_sessions = 3;
diag("model test: seed $seed (IDEM_MODEL_SEED), $n_ops operations (IDEM_MODEL_OPS), $n_sessions sessions");

my $node = PostgreSQL::Test::Cluster->new('model');
$node->init;
$node->append_conf('postgresql.conf', "log_statement = none\nlog_min_messages = warning\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION idempotency');

###############################################################################
# A psql session driven step by step: each statement is followed by a marker
# that carries its SQLSTATE.  A statement that would wait trips lock_timeout
# (55P03), or the 60 s timer: both are divergences, never a hang.
###############################################################################
package Session
{
	sub new
	{
		my ($class, $node, $direct_access) = @_;
		my $s = bless { in => '', out => '', err => '', n => 0 }, $class;
		$s->{timer} = IPC::Run::timer(60);
		$s->{h} = IPC::Run::start(
			[ 'psql', '-X', '-q', '-At', '-h', $node->host, '-p', $node->port, '-d', 'postgres' ],
			'<', \$s->{in}, '>', \$s->{out}, '2>', \$s->{err}, $s->{timer});
		$s->q("SET lock_timeout = '2s'");
		$s->q("SET idempotency.direct_access = $direct_access");
		return $s;
	}

	# returns (sqlstate, output)
	sub q
	{
		my ($s, $sql) = @_;
		my $n = ++$s->{n};
		$s->{out} = '';
		$s->{err} = '';
		$s->{in} .= "$sql;\n\\echo \@\@$n :SQLSTATE\n";
		$s->{timer}->start(60);
		$s->{h}->pump until $s->{out} =~ /\@\@$n (\w+)\n/;
		my $state = $1;
		my $out = $s->{out};
		$out =~ s/\@\@$n \w+\n\z//;
		chomp $out;
		return ($state, $out);
	}

	sub quit
	{
		my ($s) = @_;
		$s->{in} .= "\\q\n";
		$s->{h}->finish;
	}
}
package main;

###############################################################################
# The reference model
###############################################################################
my @ids = ([ '', 'k0' ], [ '', 'k1' ], [ 'a', 'k0' ], [ 'a', 'k1' ]);
sub idname { my ($id) = @_; return "$ids[$id][0]/$ids[$id][1]" }

my %stats;        # figures of the counted run
my $counting = 0;
my %committed;    # id => record
my @sess;         # per session: in_tx, aborted, overlay, held, savepoints, fences
my $next_value;   # results and errors are {"n": counter}

sub deep
{
	my ($x) = @_;
	return $x unless ref $x;
	return [ map { deep($_) } @$x ] if ref $x eq 'ARRAY';
	return { map { $_ => deep($x->{$_}) } keys %$x };
}

sub reset_model
{
	%committed = ();
	@sess = map { { in_tx => 0, aborted => 0, overlay => {}, held => {}, sp => [], fences => {} } } 1 .. $n_sessions;
	$next_value = 0;
}

# the record session s sees (its own writes over the committed state)
sub visible
{
	my ($s, $id) = @_;
	my $o = $sess[$s]{overlay};
	if (exists $o->{$id})
	{
		return $o->{$id}{deleted} ? undef : $o->{$id};
	}
	return $committed{$id};
}

# another session's open transaction has written the row of id
sub writer_of
{
	my ($s, $id) = @_;
	for my $t (0 .. $#sess)
	{
		next if $t == $s;
		return $t if $sess[$t]{in_tx} && exists $sess[$t]{overlay}{$id};
	}
	return undef;
}

sub expired
{
	my ($r) = @_;
	return $r->{expired} && $r->{status} ne 'unknown' && !($r->{leased} && $r->{live});
}

sub write_row
{
	my ($s, $id, $r) = @_;
	$sess[$s]{overlay}{$id} = $r;
}

sub fp_text { my ($fp) = @_; return defined $fp ? "\\x0$fp" : '' }

sub claim_answer
{
	my ($outcome, $r, $retry) = @_;
	return join '|', $outcome, $r ? ($r->{status}, $r->{result} // '', $r->{fence}, $r->{rp} // '') : ('', '', '', ''),
	  $retry ? 't' : 'f';
}

# Each model step returns (sqlstate, output) and changes the model.  An
# error inside a transaction block aborts it (see fail_in_tx).
sub m_claim
{
	my ($s, $op) = @_;
	my ($id, $fp, $wait, $lease) = @$op{qw(id fp wait leased)};
	my $w = writer_of($s, $id);
	if (defined $w)
	{
		my $o = $sess[$w]{overlay}{$id};
		return ('IK001', '') if defined $fp && defined $o->{fp} && $o->{fp} ne $fp;
		return ('00000', claim_answer('in_progress', undef, 0));
	}
	my $r = visible($s, $id);
	my $new = sub {
		my ($fence, $fpv, $rp, $result) = @_;
		my $n = { status => 'in_progress', fp => $fpv, result => $result, rp => $rp, fence => $fence,
			leased => $lease ? 1 : 0, live => $lease ? 1 : 0, expired => 0 };
		write_row($s, $id, $n);
		$sess[$s]{held}{$id} = { fence => $fence, finished => 0 } unless $lease;
		$sess[$s]{fences}{$id} = $fence;
		return ('00000', claim_answer('claimed', $n, 0));
	};
	return $new->(1, $fp, undef) unless $r;
	my $h = $sess[$s]{held}{$id};
	if ($h && !$h->{finished})
	{
		return ('IK001', '') if defined $fp && defined $r->{fp} && $r->{fp} ne $fp;
		return ('00000', claim_answer('in_progress', $r, 0));
	}
	return $new->($r->{fence} + 1, $fp, undef) if expired($r);
	return ('IK001', '') if defined $fp && defined $r->{fp} && $r->{fp} ne $fp;
	return ('00000', claim_answer('replay', $r, 0)) if $r->{status} eq 'succeeded' || $r->{status} eq 'failed';
	return ('00000', claim_answer('in_progress', $r, 0)) if $r->{status} eq 'unknown';
	return ('00000', claim_answer('in_progress', $r, 1)) if $r->{leased} && $r->{live};
	# takeover: the fingerprint stays (or is set), the recovery point and
	# the last retryable error stay
	return $new->($r->{fence} + 1, $r->{fp} // $fp, $r->{rp}, $r->{result});
}

# The fence a write must carry (README "Writes after a claim"), or an error
sub required_fence
{
	my ($s, $id, $fence) = @_;
	my $h = $sess[$s]{held}{$id};
	if ($h)
	{
		return ('IK002') if $h->{finished};
		return ('IK003') if defined $fence && $fence != $h->{fence};
		return (undef, $h->{fence}, $h);
	}
	return (undef, $fence, undef) if defined $fence;
	my $r = visible($s, $id);
	return ('IK003')
	  if $r && ($r->{status} eq 'unknown' || ($r->{status} eq 'in_progress' && $r->{leased}));
	return ('IK002');
}

sub refusal
{
	my ($s, $id, $fence) = @_;
	my $r = visible($s, $id);
	return 'IK002' if !$r;
	return 'IK003' if $r->{fence} != $fence;
	return 'IK002';
}

# finish, fail, mark_unknown, checkpoint, extend_lease
sub m_write
{
	my ($s, $op) = @_;
	my ($kind, $id) = @$op{qw(kind id)};
	my ($err, $fence, $held) = required_fence($s, $id, $op->{fence_value});
	return ($err, '') if $err;
	my $r = visible($s, $id);
	my $open = $r && $r->{fence} == $fence
	  && ($r->{status} eq 'in_progress' || ($r->{status} eq 'unknown' && $kind =~ /^(finish|fail|mark_unknown)$/));
	$open = 0 if $open && $kind eq 'extend_lease' && !$r->{leased};
	return (refusal($s, $id, $fence), '') unless $open;
	my $n = deep($r);
	if ($kind eq 'finish')          { @$n{qw(status result leased live)} = ('succeeded', $op->{value}, 0, 0) }
	elsif ($kind eq 'mark_unknown') { @$n{qw(status result leased live)} = ('unknown', $op->{value}, 0, 0) }
	elsif ($kind eq 'fail' && !$op->{retryable}) { @$n{qw(status result leased live)} = ('failed', $op->{value}, 0, 0) }
	elsif ($kind eq 'fail')         { @$n{qw(status result leased live)} = ('in_progress', $op->{value}, 1, 0) }
	elsif ($kind eq 'checkpoint')   { $n->{rp} = $op->{value} }
	elsif ($kind eq 'extend_lease') { $n->{live} = 1 }
	write_row($s, $id, $n);
	$held->{finished} = 1 if $held && $kind =~ /^(finish|fail|mark_unknown)$/;
	return ('00000', $kind eq 'extend_lease' ? 't' : '');
}

sub m_lookup
{
	my ($s, $op) = @_;
	my $r = visible($s, $op->{id});
	return ('00000', '') if !$r || expired($r);
	return ('00000', join '|', $r->{status}, fp_text($r->{fp}), $r->{result} // '', $r->{rp} // '',
		$r->{fence}, $r->{leased} ? 't' : 'f');
}

sub commit_overlay
{
	my ($s) = @_;
	while (my ($id, $r) = each %{ $sess[$s]{overlay} })
	{
		if ($r->{deleted}) { delete $committed{$id} }
		else               { $committed{$id} = deep($r) }
	}
	end_tx($s);
}

sub end_tx
{
	my ($s) = @_;
	@{ $sess[$s] }{qw(in_tx aborted overlay held sp)} = (0, 0, {}, {}, []);
}

# An error in a transaction block: the innermost savepoint's work is undone
# (or the whole transaction's) and the block waits for ROLLBACK [TO]
sub fail_in_tx
{
	my ($s) = @_;
	my $x = $sess[$s];
	if (@{ $x->{sp} })
	{
		my $top = $x->{sp}[-1];
		$x->{overlay} = deep($top->{overlay});
		$x->{held} = deep($top->{held});
	}
	else
	{
		$x->{overlay} = {};
		$x->{held} = {};
	}
	$x->{aborted} = 1;
}

# Run one step in the model; returns the expected (sqlstate, output).
sub model_step
{
	my ($op) = @_;
	my $s = $op->{s};
	my $x = $s >= 0 ? $sess[$s] : undef;
	my $k = $op->{kind};
	if ($k eq 'begin') { $x->{in_tx} = 1; return ('00000', '') }
	if ($k eq 'commit')
	{
		if ($x->{aborted}) { end_tx($s); return ('00000', '') }
		if (grep { !$_->{finished} } values %{ $x->{held} }) { end_tx($s); return ('IK004', '') }
		commit_overlay($s);
		return ('00000', '');
	}
	if ($k eq 'rollback') { end_tx($s); return ('00000', '') }
	if ($k eq 'savepoint')
	{
		push @{ $x->{sp} }, { name => $op->{name}, overlay => deep($x->{overlay}), held => deep($x->{held}) };
		return ('00000', '');
	}
	if ($k eq 'rollback_to' || $k eq 'release')
	{
		my ($i) = grep { $x->{sp}[$_]{name} eq $op->{name} } reverse 0 .. $#{ $x->{sp} };
		if ($k eq 'rollback_to')
		{
			splice @{ $x->{sp} }, $i + 1;
			$x->{overlay} = deep($x->{sp}[$i]{overlay});
			$x->{held} = deep($x->{sp}[$i]{held});
			$x->{aborted} = 0;
		}
		else { splice @{ $x->{sp} }, $i }
		return ('00000', '');
	}
	if ($k eq 'expire_lease')
	{
		my $r = $committed{ $op->{id} };
		$r->{live} = 0 if $r && $r->{leased};
		return ('00000', '');
	}
	if ($k eq 'expire_record')
	{
		my $r = $committed{ $op->{id} };
		$r->{expired} = 1 if $r;
		return ('00000', '');
	}

	# function calls: in autocommit a transaction of their own; a leased
	# claim must be one (25001 in a transaction block)
	my $autocommit = !$x->{in_tx};
	$x->{in_tx} = 1 if $autocommit;
	my ($state, $out) =
	    $k eq 'claim' && $op->{leased} && !$autocommit ? ('25001', '')
	  : $k eq 'claim'  ? m_claim($s, $op)
	  : $k eq 'lookup' ? m_lookup($s, $op)
	  :                  m_write($s, $op);
	if ($autocommit)
	{
		if ($state ne '00000') { end_tx($s) }
		elsif (grep { !$_->{finished} } values %{ $x->{held} }) { end_tx($s); ($state, $out) = ('IK004', '') }
		else { commit_overlay($s) }
	}
	elsif ($state ne '00000') { fail_in_tx($s) }
	$out = '' if $state ne '00000';
	return ($state, $out);
}

###############################################################################
# Steps: what they are, when they are possible, their SQL
###############################################################################

# May $op run now without waiting for another session?  Fills in what the
# current model state decides (fence values, savepoint names).
sub resolve
{
	my ($op) = @_;
	my $s = $op->{s};
	my $k = $op->{kind};
	if ($s < 0)    # the control connection writes rows outside any session
	{
		return !grep { $_->{in_tx} && exists $_->{overlay}{ $op->{id} } } @sess;
	}
	my $x = $sess[$s];
	if ($k eq 'rollback_to' || $k eq 'release')
	{
		return 0 unless $x->{in_tx} && @{ $x->{sp} };
		return 0 if $k eq 'release' && $x->{aborted};
		$op->{name} //= $x->{sp}[ $op->{pick} % @{ $x->{sp} } ]{name};
		return scalar grep { $_->{name} eq $op->{name} } @{ $x->{sp} };
	}
	return $k eq 'rollback' || $k eq 'commit' if $x->{aborted};
	return !$x->{in_tx} if $k eq 'begin';
	return $x->{in_tx} if $k eq 'commit' || $k eq 'rollback' || $k eq 'savepoint';
	return 1 if $k eq 'lookup';
	my $w = writer_of($s, $op->{id});
	if ($k eq 'claim')
	{
		# a leased claim in a transaction block is refused (25001) and
		# aborts the block: keep one in ten, make the others in-transaction
		$op->{leased} = $op->{lease} && !($x->{in_tx} && $op->{pick} % 10) ? 1 : 0;
		# next to another session's uncommitted write, only wait => false
		$op->{forced_nowait} = defined $w ? 1 : 0;
		$stats{'claims next to an uncommitted write'}++ if defined $w && $counting;
		return 1;
	}
	return 0 if defined $w;
	# mostly a key this session claimed (drawn with the step)
	if ($op->{own_key})
	{
		my @mine = sort keys %{ $x->{fences} };
		$op->{id} = $mine[ $op->{pick} % @mine ] if @mine;
		return 0 if defined writer_of($s, $op->{id});
	}
	# fences: the one this session's claim returned, the record's current
	# one (a reconciler reading idem_pending), one older, one newer, none
	my $r = visible($s, $op->{id});
	my $cur = $r ? $r->{fence} : 1;
	my %f = (none => undef, mine => $x->{fences}{ $op->{id} }, current => $cur,
		stale => $cur - 1, future => $cur + 1);
	$op->{fence_value} = $f{ $op->{fence} };
	return 1;
}

sub op_sql
{
	my ($op) = @_;
	my $k = $op->{kind};
	my ($scope, $key) = defined $op->{id} ? @{ $ids[ $op->{id} ] } : ();
	my $fence = defined $op->{fence_value} ? ", fence => $op->{fence_value}" : '';
	return 'BEGIN' if $k eq 'begin';
	return 'COMMIT' if $k eq 'commit';
	return 'ROLLBACK' if $k eq 'rollback';
	return "SAVEPOINT $op->{name}" if $k eq 'savepoint';
	return "ROLLBACK TO SAVEPOINT $op->{name}" if $k eq 'rollback_to';
	return "RELEASE SAVEPOINT $op->{name}" if $k eq 'release';
	my $where = "scope = '$scope' AND key = '$key'";
	return "UPDATE idempotent_record SET locked_until = clock_timestamp() - interval '1 second' WHERE $where AND locked_until IS NOT NULL"
	  if $k eq 'expire_lease';
	return "UPDATE idempotent_record SET expires_at = clock_timestamp() - interval '1 second' WHERE $where"
	  if $k eq 'expire_record';
	if ($k eq 'claim')
	{
		my $args = "'$key', scope => '$scope'";
		$args .= ", fingerprint => '\\x0$op->{fp}'" if defined $op->{fp};
		$args .= ', wait => false' unless $op->{wait} && !$op->{forced_nowait};
		$args .= ", lease => '1 hour'" if $op->{leased};
		return "SELECT outcome, status, result, fence, recovery_point, retry_after IS NOT NULL FROM idem_claim($args)";
	}
	return "SELECT status, fingerprint, result, recovery_point, fence, locked_until IS NOT NULL FROM idem_lookup('$key', '$scope')"
	  if $k eq 'lookup';
	return "SELECT idem_finish('$key', '$op->{value}', scope => '$scope'$fence)" if $k eq 'finish';
	return "SELECT idem_fail('$key', '$op->{value}', retryable => " . ($op->{retryable} ? 'true' : 'false') . ", scope => '$scope'$fence)"
	  if $k eq 'fail';
	return "SELECT idem_mark_unknown('$key', '$op->{value}', scope => '$scope'$fence)" if $k eq 'mark_unknown';
	return "SELECT idem_checkpoint('$key', '$op->{value}', scope => '$scope'$fence)" if $k eq 'checkpoint';
	return "SELECT idem_extend_lease('$key', '1 hour', scope => '$scope'$fence) IS NOT NULL" if $k eq 'extend_lease';
	die "unknown step $k";
}

sub op_text
{
	my ($op) = @_;
	my $who = $op->{s} < 0 ? 'ctl' : "s$op->{s}";
	return "$who: " . op_sql($op);
}

# A random step (its preconditions are checked by resolve)
my @weights = (claim => 30, finish => 10, fail => 9, mark_unknown => 3, checkpoint => 5,
	extend_lease => 3, lookup => 5, begin => 9, commit => 8, rollback => 3, savepoint => 6,
	rollback_to => 6, release => 3, expire_lease => 5, expire_record => 3);
my $weight_sum = 0;
$weight_sum += $weights[ 2 * $_ + 1 ] for 0 .. @weights / 2 - 1;
my $sp_counter = 0;

sub random_op
{
	my $r = rand($weight_sum);
	my $kind;
	for (my $i = 0; $i < @weights; $i += 2)
	{
		$kind = $weights[$i];
		last if ($r -= $weights[ $i + 1 ]) < 0;
	}
	my $op = { kind => $kind, s => int(rand($n_sessions)) };
	$op->{s} = -1 if $kind =~ /^expire_/;
	$op->{id} = int(rand(@ids));
	if ($kind eq 'claim')
	{
		my $f = int(rand(5));
		$op->{fp} = $f >= 3 ? undef : $f == 2 ? 2 : 1;
		$op->{wait} = rand() < 0.7 ? 1 : 0;
		$op->{lease} = rand() < 0.4 ? 1 : 0;
	}
	if ($kind =~ /^(finish|fail|mark_unknown|checkpoint|extend_lease)$/)
	{
		my @f = qw(none mine mine mine current current stale future);
		$op->{fence} = $f[ int(rand(@f)) ];
		$op->{value} = $kind eq 'checkpoint' ? 'p' . ++$sp_counter : '{"n": ' . ++$sp_counter . '}';
		$op->{retryable} = rand() < 0.5 ? 1 : 0;
		$op->{own_key} = rand() < 0.7 ? 1 : 0;
	}
	$op->{name} = 'sp' . ++$sp_counter if $kind eq 'savepoint';
	$op->{pick} = int(rand(100));
	return $op;
}

###############################################################################
# Running steps against the database and the model
###############################################################################
# the last session takes the planned-SQL path, the others the direct one, so
# that the two paths meet on the same keys
my @conn = map { Session->new($node, $_ < $n_sessions ? 'on' : 'off') } 1 .. $n_sessions;
my $ctl = Session->new($node, 'on');

my $state_sql = q{SELECT scope, key, status, fingerprint, result, recovery_point, fence,
       locked_until IS NOT NULL, coalesce(locked_until > clock_timestamp(), false),
       expires_at <= clock_timestamp()
  FROM idempotent_record ORDER BY scope, key};

sub model_state
{
	my @rows;
	for my $id (sort { $ids[$a][0] cmp $ids[$b][0] || $ids[$a][1] cmp $ids[$b][1] } keys %committed)
	{
		my $r = $committed{$id};
		push @rows, join '|', @{ $ids[$id] }, $r->{status}, fp_text($r->{fp}), $r->{result} // '',
		  $r->{rp} // '', $r->{fence}, $r->{leased} ? 't' : 'f', ($r->{leased} && $r->{live}) ? 't' : 'f',
		  $r->{expired} ? 't' : 'f';
	}
	return join "\n", @rows;
}

sub fresh_start
{
	for my $c (@conn) { $c->q('ROLLBACK') }
	$ctl->q('TRUNCATE idempotent_record');
	reset_model();
}

# Run the steps of @$ops (skipping those not possible at their turn);
# returns undef, or a description of the first divergence and how many
# steps it took.
sub run_ops
{
	my ($ops, $count, $limit) = @_;
	fresh_start();
	my ($i, $done) = (0, 0);
	for my $op (@$ops)
	{
		last if $limit && $done >= $limit;
		$i++;
		next unless resolve($op);
		$done++;
		my $c = $op->{s} < 0 ? $ctl : $conn[ $op->{s} ];
		my ($got_state, $got) = eval { $c->q(op_sql($op)) };
		return ("step blocked or psql died: $@", $i) if $@;
		my ($want_state, $want) = model_step($op);
		if ($count)
		{
			$stats{steps}++;
			$stats{"$op->{kind}"}++;
			$stats{"answer $got_state"}++ if $got_state ne '00000';
			$stats{ 'outcome ' . (split /\|/, $got)[0] }++ if $op->{kind} eq 'claim' && $got_state eq '00000';
		}
		if ($got_state ne $want_state || $got ne $want)
		{
			return ("step $i: " . op_text($op) . "\n  model: $want_state $want\n  server: $got_state $got", $i);
		}
		my (undef, $table) = $ctl->q($state_sql);
		my $mine = model_state();
		return ("after step $i: " . op_text($op) . "\n  model table:\n$mine\n  server table:\n$table", $i)
		  if $table ne $mine;
	}
	return (undef, $i);
}

# the shortest subsequence of @$ops (up to the divergence) that diverges
sub shrink
{
	my ($ops) = @_;
	my $deadline = time() + 120;
	my $chunk = int(@$ops / 2) || 1;
	while ($chunk >= 1 && time() < $deadline)
	{
		my $changed = 0;
		for (my $i = 0; $i < @$ops && time() < $deadline;)
		{
			my @cand = (@$ops[ 0 .. $i - 1 ], @$ops[ $i + $chunk .. $#$ops ]);
			my ($why, $at) = run_ops([ map { deep($_) } @cand ]);
			if (defined $why) { $ops = [ @cand[ 0 .. $at - 1 ] ]; $changed = 1 }
			else              { $i += $chunk }
		}
		$chunk = int($chunk / 2) unless $changed;
	}
	return $ops;
}

srand($seed);
# draw more than needed: steps not possible at their turn are skipped
my @ops = map { random_op() } 1 .. 3 * $n_ops;
my $start = time();
$counting = 1;
my ($why, $at) = run_ops([ map { deep($_) } @ops ], 1, $n_ops);
$counting = 0;
my $elapsed = time() - $start;
is($why, undef, "the server agrees with the model on every step (seed $seed)");
if (defined $why)
{
	diag("divergence with seed $seed:\n$why");
	my $short = shrink([ @ops[ 0 .. $at - 1 ] ]);
	my ($why2) = run_ops([ map { deep($_) } @$short ]);
	my @lines;
	reset_model();
	for my $op (map { deep($_) } @$short)
	{
		next unless resolve($op);
		push @lines, op_text($op);
		model_step($op);
	}
	diag("shortest sequence found (" . scalar(@lines) . " steps), seed $seed:\n  "
		  . join("\n  ", @lines) . "\n" . ($why2 // ''));
}
ok(defined $why || $stats{steps} == $n_ops, "$n_ops steps ran");
diag(sprintf("model figures: seed %d, steps %d, %.1f s; %s",
	$seed, $stats{steps}, $elapsed,
	join(', ', map { "$_ $stats{$_}" } grep { $_ ne 'steps' } sort keys %stats)));

$_->quit for @conn, $ctl;
$node->stop;
done_testing();
