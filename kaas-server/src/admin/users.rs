//! `kaas admin users`: SCRAM users (DescribeUserScramCredentials, AlterUserScramCredentials).
//! A password is salted and hashed here, as Kafka's clients do, so that it never crosses the
//! wire; give it on stdin rather than the command line, where `ps` shows it.

use kaas_core::cluster::scram::ScramMechanism;
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::*;
use rand::RngCore;

use super::connection::{Admin, check, text};
use super::table::Table;
use crate::cells;

/// Apache's default, and the least it accepts.
const ITERATIONS_DEFAULT: i32 = 4096;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Every SCRAM user with the mechanisms it has credentials for
    List,
    /// Some users' mechanisms and iterations
    Describe { users: Vec<String> },
    /// Set a user's password for a mechanism (read from stdin unless --password is given)
    Set {
        user: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512
        #[arg(long, default_value = "SCRAM-SHA-512")]
        mechanism: String,
        #[arg(long, default_value_t = ITERATIONS_DEFAULT)]
        iterations: i32,
        /// The password (visible to `ps`: prefer stdin)
        #[arg(long)]
        password: Option<String>,
    },
    /// Delete a user's credential for a mechanism
    Delete {
        user: String,
        #[arg(long, default_value = "SCRAM-SHA-512")]
        mechanism: String,
    },
}

fn mechanism(name: &str) -> Result<ScramMechanism, String> {
    ScramMechanism::from_name(&name.to_ascii_uppercase()).ok_or(format!("{name}: not SCRAM-SHA-256 or SCRAM-SHA-512"))
}

pub async fn run(admin: &mut Admin, command: Command) -> Result<Vec<Table>, String> {
    match command {
        Command::List => describe(admin, None).await,
        Command::Describe { users } => describe(admin, Some(users)).await,
        Command::Set { user, mechanism: name, iterations, password } => {
            let mechanism = mechanism(&name)?;
            let password = match password {
                Some(p) => p,
                None => {
                    let mut line = String::new();
                    std::io::stdin().read_line(&mut line).map_err(|e| format!("stdin: {e}"))?;
                    line.trim_end_matches(['\r', '\n']).to_string()
                }
            };
            if password.is_empty() {
                return Err("an empty password".into());
            }
            let mut salt = [0u8; 32];
            rand::rng().fill_bytes(&mut salt);
            let iterations_u =
                u32::try_from(iterations).ok().filter(|i| *i > 0).ok_or("--iterations must be positive")?;
            let salted: Vec<u8> = match mechanism {
                ScramMechanism::Sha256 => {
                    let mut out = Default::default();
                    rsasl::mechanisms::scram::tools::hash_password::<sha2::Sha256>(
                        password.as_bytes(),
                        iterations_u,
                        &salt,
                        &mut out,
                    );
                    out.to_vec()
                }
                ScramMechanism::Sha512 => {
                    let mut out = Default::default();
                    rsasl::mechanisms::scram::tools::hash_password::<sha2::Sha512>(
                        password.as_bytes(),
                        iterations_u,
                        &salt,
                        &mut out,
                    );
                    out.to_vec()
                }
            };
            let upsertion = ScramCredentialUpsertion::default()
                .with_name(text(&user))
                .with_mechanism(mechanism.code())
                .with_iterations(iterations)
                .with_salt(salt.to_vec().into())
                .with_salted_password(salted.into());
            alter(admin, AlterUserScramCredentialsRequest::default().with_upsertions(vec![upsertion])).await?;
            let mut table = Table::new("set", &["USER", "MECHANISM", "ITERATIONS"]);
            table.row(cells![user, mechanism.name(), iterations]);
            Ok(vec![table])
        }
        Command::Delete { user, mechanism: name } => {
            let mechanism = mechanism(&name)?;
            let deletion = ScramCredentialDeletion::default().with_name(text(&user)).with_mechanism(mechanism.code());
            alter(admin, AlterUserScramCredentialsRequest::default().with_deletions(vec![deletion])).await?;
            let mut table = Table::new("deleted", &["USER", "MECHANISM"]);
            table.row(cells![user, mechanism.name()]);
            Ok(vec![table])
        }
    }
}

async fn alter(admin: &mut Admin, request: AlterUserScramCredentialsRequest) -> Result<(), String> {
    let answer: AlterUserScramCredentialsResponse = admin.call(ApiKey::AlterUserScramCredentials, 0, &request).await?;
    for r in &answer.results {
        check(&format!("user {}", r.user.as_str()), r.error_code, r.error_message.as_ref())?;
    }
    Ok(())
}

async fn describe(admin: &mut Admin, users: Option<Vec<String>>) -> Result<Vec<Table>, String> {
    let request = DescribeUserScramCredentialsRequest::default()
        .with_users(users.map(|us| us.iter().map(|u| UserName::default().with_name(text(u))).collect()));
    let answer: DescribeUserScramCredentialsResponse =
        admin.call(ApiKey::DescribeUserScramCredentials, 0, &request).await?;
    check("DescribeUserScramCredentials", answer.error_code, answer.error_message.as_ref())?;
    let mut table = Table::new("users", &["USER", "MECHANISM", "ITERATIONS", "ERROR"]);
    for r in &answer.results {
        if r.error_code != 0 {
            table.row(cells![r.user.as_str(), "-", "-", super::connection::error_name(r.error_code)]);
        }
        for c in &r.credential_infos {
            let name = ScramMechanism::from_code(c.mechanism).map_or("?", |m| m.name());
            table.row(cells![r.user.as_str(), name, c.iterations, ""]);
        }
    }
    Ok(vec![table])
}
