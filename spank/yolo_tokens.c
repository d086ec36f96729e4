/*
 * yolo_tokens: a SPANK plugin carrying a job's token estimate from sbatch/salloc/srun options
 * (--yolo-tokens=N, also as an #SBATCH line) to the slurmctld prolog and epilog, which see it as
 * SPANK_YOLO_TOKENS. The ledger records it beside the hold it computes from trusted Slurm fields:
 * it is the user's claim, never what is charged.
 *
 * plugstack.conf:  optional /path/to/yolo_tokens.so
 * It takes no plugstack arguments; any argument is refused, so a typo cannot go unnoticed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/spank.h>

SPANK_PLUGIN(yolo_tokens, 1);

#define PREFIX     "yolo_tokens: "
#define MAX_DIGITS 19 /* tokens fit in a signed 64-bit integer */

static char tokens[MAX_DIGITS + 1];

static int parse_tokens(int val, const char *optarg, int remote);

static struct spank_option tokens_option = {
	"yolo-tokens",
	"N",
	"Estimated effective tokens of this job (slurm-yolo); the ledger records it beside its own hold.",
	1,
	0,
	parse_tokens,
};

/* Strict: digits only, no sign, no leading zeros, at most 10^18. */
static int valid_tokens(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > MAX_DIGITS - 1 || (n > 1 && s[0] == '0'))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return 0;
	return 1;
}

static int parse_tokens(int val, const char *optarg, int remote)
{
	(void)val;
	(void)remote;
	if (optarg == NULL || !valid_tokens(optarg)) {
		slurm_error(PREFIX "--yolo-tokens: '%s' is not a whole number of tokens (0 to 10^18)",
			    optarg ? optarg : "");
		return -1;
	}
	strncpy(tokens, optarg, sizeof(tokens) - 1);
	tokens[sizeof(tokens) - 1] = '\0';
	return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	for (int i = 0; i < ac; i++) {
		slurm_error(PREFIX "unknown plugstack argument '%s' (this plugin takes none)", av[i]);
		return -1;
	}
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
	case S_CTX_REMOTE:
		if (spank_option_register(sp, &tokens_option) != ESPANK_SUCCESS) {
			slurm_error(PREFIX "cannot register --yolo-tokens");
			return -1;
		}
		break;
	default:
		break;
	}
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	spank_context_t ctx = spank_context();
	if (tokens[0] == '\0' || (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR))
		return 0;
	if (spank_job_control_setenv(sp, "YOLO_TOKENS", tokens, 1) != ESPANK_SUCCESS) {
		slurm_error(PREFIX "cannot pass YOLO_TOKENS to the job's prolog and epilog");
		return -1;
	}
	return 0;
}
